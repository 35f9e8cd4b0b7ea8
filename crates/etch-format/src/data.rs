//! Where a program's bytes come from: a memory-mapped file or an owned, aligned buffer.

use etch_core::{AlignedBuf, Error, Result};
use std::path::Path;

/// Bytes of a `.pte` or `.ptd`, kept alive as long as anything refers to them.
pub enum DataSource {
    /// A private (copy-on-write) memory map of a file: page-aligned and zero-copy.
    Mapped(memmap2::MmapMut),
    /// A copy in aligned host memory (for callers that hand over bytes).
    Owned(AlignedBuf),
}

impl DataSource {
    /// Maps a file read-only.
    pub fn map_file(path: &Path) -> Result<Self> {
        let file = std::fs::File::open(path)
            .map_err(|e| Error::access_failed(format!("cannot open '{}': {e}", path.display())))?;
        let len = file
            .metadata()
            .map_err(|e| Error::access_failed(format!("cannot stat '{}': {e}", path.display())))?
            .len();
        if len == 0 {
            return Ok(DataSource::Owned(AlignedBuf::zeroed(0)?));
        }
        // SAFETY: the map is private (copy-on-write): the file is never written through it, and
        // a stray write by a malformed program stays in this process instead of faulting.
        // Like every mmap-based loader we rely on the file not being truncated or rewritten
        // while mapped; this is documented on `Module::from_file`.
        let map = unsafe { memmap2::MmapOptions::new().map_copy(&file) }
            .map_err(|e| Error::access_failed(format!("cannot map '{}': {e}", path.display())))?;
        Ok(DataSource::Mapped(map))
    }

    /// Copies bytes into aligned memory.
    pub fn copy_from(bytes: &[u8]) -> Result<Self> {
        Ok(DataSource::Owned(AlignedBuf::from_bytes(bytes)?))
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            DataSource::Mapped(m) => m,
            DataSource::Owned(b) => b.as_slice(),
        }
    }
}
