//! Helpers shared by the GPU tests that compare the CUDA kernels with the CPU kernels.

/// The device under test: `ETCH_CUDA_DEVICE` (default 0).
pub fn ix() -> i8 {
    std::env::var("ETCH_CUDA_DEVICE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// A xorshift generator of test data.
pub struct Rng(pub u64);
impl Rng {
    /// Uniform in [-2, 2).
    pub fn f(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
    }
}
