//! Portable CPU kernels for ExecuTorch operators.
#![warn(missing_docs)]

use etch_core::{KernelRegistry, Result};

/// Registers every portable CPU kernel into `reg`.
pub fn register_portable(reg: &mut KernelRegistry) -> Result<()> {
    let _ = reg;
    Ok(())
}

/// A registry holding the portable CPU kernels.
pub fn portable_registry() -> KernelRegistry {
    let mut reg = KernelRegistry::new();
    // Registration into a fresh registry cannot collide.
    let _ = register_portable(&mut reg);
    reg
}
