//! Where a program's bytes come from: a memory-mapped file or an owned, aligned buffer.

use etch_core::{AlignedBuf, Error, Result};
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

/// Bytes of a `.pte`, `.ptd` or `.safetensors` file, kept alive as long as anything refers
/// to them.
pub enum DataSource {
    /// A private (copy-on-write) memory map of a file: page-aligned and zero-copy; and the
    /// open file, which [`DataSource::read_at`] reads without mapping pages.
    Mapped(memmap2::MmapMut, std::fs::File),
    /// A copy in aligned host memory (for callers that hand over bytes).
    Owned(AlignedBuf),
    /// A range of another source, zero-copy: a program embedded in a bundled program
    /// (`.bpte`). The range was checked against the parent when it was made.
    Slice(Arc<DataSource>, Range<usize>),
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
        Ok(DataSource::Mapped(map, file))
    }

    /// Copies bytes into aligned memory.
    pub fn copy_from(bytes: &[u8]) -> Result<Self> {
        Ok(DataSource::Owned(AlignedBuf::from_bytes(bytes)?))
    }

    /// Bytes `range` of `parent`, without copying; an error when the range lies outside it.
    pub fn slice(parent: Arc<DataSource>, range: Range<usize>) -> Result<Self> {
        if range.start > range.end || range.end > parent.len() {
            return Err(Error::invalid_program(format!(
                "range [{}, {}) lies outside the {}-byte source",
                range.start,
                range.end,
                parent.len()
            )));
        }
        Ok(DataSource::Slice(parent, range))
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            DataSource::Mapped(m, _) => m,
            DataSource::Owned(b) => b.as_slice(),
            // The range was checked against the parent in `slice`; `get` keeps this
            // panic-free regardless.
            DataSource::Slice(parent, range) => parent.bytes().get(range.clone()).unwrap_or(&[]),
        }
    }

    /// Copies bytes `[offset, offset + dst.len())` into `dst`. A mapped file is read with
    /// `pread` (on Unix): the page cache is copied straight into `dst`, and the pages are
    /// not mapped into this process, so streaming a checkpoint to a device does not grow
    /// the resident set by the checkpoint. A file that became shorter than its map is an
    /// `AccessFailed` error (reading the map there would fault).
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        let range = etch_core::source::checked_source_range(offset, dst.len(), self.len())?;
        match self {
            DataSource::Slice(parent, r) => parent.read_at(r.start + offset, dst),
            #[cfg(unix)]
            DataSource::Mapped(_, file) => {
                use std::os::unix::fs::FileExt;
                file.read_exact_at(dst, offset as u64).map_err(|e| {
                    Error::access_failed(format!(
                        "cannot read {} bytes at offset {offset} of a mapped file (was it \
                         truncated or replaced?): {e}",
                        dst.len()
                    ))
                })
            }
            _ => {
                dst.copy_from_slice(&self.bytes()[range]);
                Ok(())
            }
        }
    }

    /// Asks the OS to read `[offset, offset + len)` of a mapped file into the page cache
    /// soon (`madvise(MADV_WILLNEED)`); a hint, ignored where unsupported.
    pub fn prefetch(&self, offset: usize, len: usize) {
        if let DataSource::Slice(parent, r) = self {
            if offset.checked_add(len).is_some_and(|end| end <= r.len()) {
                parent.prefetch(r.start + offset, len);
            }
            return;
        }
        #[cfg(unix)]
        if let DataSource::Mapped(m, _) = self
            && offset.checked_add(len).is_some_and(|end| end <= m.len())
            && len > 0
        {
            let _ = m.advise_range(memmap2::Advice::WillNeed, offset, len);
        }
        #[cfg(not(unix))]
        let _ = (offset, len);
    }

    /// Number of bytes.
    pub fn len(&self) -> usize {
        self.bytes().len()
    }

    /// True when there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
