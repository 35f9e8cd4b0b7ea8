//! [`TensorPieces`]: a tensor as the program wants it, described by the stored tensors it
//! is made of (the per-expert parts of a stacked weight, or one tensor in another dtype)
//! and produced on demand, range by range. The host builds a tensor from it in one call;
//! a device copy reads it chunk by chunk into staging memory, so no host copy of the whole
//! tensor is made. Both go through [`TensorPieces::read_into`], so they give the same bytes.

use super::convert::convert;
use crate::DataSource;
use etch_core::source::checked_source_range;
use etch_core::{AlignedBuf, ByteSource, Error, Result, ScalarType};

/// Bytes of a converting read taken from the file at once (a stack buffer).
const CONVERT_BLOCK: usize = 64 << 10;

/// One stored tensor in the result.
struct Piece<'a> {
    /// Where its (converted) bytes start in the result.
    at: usize,
    /// Its bytes in the result.
    out_len: usize,
    /// The stored bytes (a view of a mapped file, or an aligned copy).
    bytes: &'a [u8],
    /// The file holding `bytes` and their offset in it, for reads that do not map pages.
    file: Option<(&'a DataSource, usize)>,
}

/// A tensor produced on demand from stored tensors, each converted from `from` to `to`
/// (equal dtypes copy) and placed one after the other.
pub struct TensorPieces<'a> {
    /// The tensor, for messages.
    what: String,
    pieces: Vec<Piece<'a>>,
    len: usize,
    from: ScalarType,
    to: ScalarType,
}

impl std::fmt::Debug for TensorPieces<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorPieces")
            .field("what", &self.what)
            .field("pieces", &self.pieces.len())
            .field("len", &self.len)
            .field("from", &self.from)
            .field("to", &self.to)
            .finish()
    }
}

impl<'a> TensorPieces<'a> {
    /// No pieces yet; stored bytes of dtype `from` become `to`.
    pub(super) fn new(what: String, from: ScalarType, to: ScalarType) -> Self {
        TensorPieces {
            what,
            pieces: Vec::new(),
            len: 0,
            from,
            to,
        }
    }

    /// Appends a stored tensor: `bytes`, held by `file` at `bytes`' place in it (when the
    /// bytes are a view of a mapped file).
    pub(super) fn push(&mut self, bytes: &'a [u8], file: Option<&'a DataSource>) -> Result<()> {
        let (fs, ts) = (self.from.element_size(), self.to.element_size());
        if fs == 0 || ts == 0 || !bytes.len().is_multiple_of(fs) {
            return Err(Error::invalid_program(format!(
                "{}: {} bytes are not whole {} elements",
                self.what,
                bytes.len(),
                self.from
            )));
        }
        let out_len = (bytes.len() / fs)
            .checked_mul(ts)
            .ok_or_else(|| Error::invalid_program(format!("{}: too large", self.what)))?;
        let file = file.and_then(|f| {
            let base = f.bytes().as_ptr() as usize;
            let off = (bytes.as_ptr() as usize).checked_sub(base)?;
            (off + bytes.len() <= f.len()).then_some((f, off))
        });
        if !bytes.is_empty() {
            self.pieces.push(Piece {
                at: self.len,
                out_len,
                bytes,
                file,
            });
        }
        self.len = self
            .len
            .checked_add(out_len)
            .ok_or_else(|| Error::invalid_program(format!("{}: too large", self.what)))?;
        Ok(())
    }

    /// The whole tensor in a new host buffer.
    pub(super) fn build(&self) -> Result<AlignedBuf> {
        let mut buf = AlignedBuf::zeroed(self.len)?;
        self.read_into(0, buf.as_mut_slice())?;
        Ok(buf)
    }

    /// Copies (converting) `src` of piece `p` into `dst`.
    fn read_piece(&self, p: &Piece<'_>, src: std::ops::Range<usize>, dst: &mut [u8]) -> Result<()> {
        let at_file = |s: usize| p.file.map(|(f, base)| (f, base + s));
        if self.from == self.to {
            return match at_file(src.start) {
                Some((f, off)) => f.read_at(off, dst),
                None => {
                    let b = p.bytes.get(src).ok_or_else(out_of_bounds)?;
                    dst.copy_from_slice(b);
                    Ok(())
                }
            };
        }
        let (fs, ts) = (self.from.element_size(), self.to.element_size());
        let Some((f, off)) = at_file(src.start) else {
            let b = p.bytes.get(src).ok_or_else(out_of_bounds)?;
            return convert(b, self.from, dst, self.to);
        };
        // From the file through a small buffer, a block of whole elements at a time.
        let mut tmp = [0u8; CONVERT_BLOCK];
        let per_block = CONVERT_BLOCK / fs;
        let mut done = 0;
        for d in dst.chunks_mut(per_block * ts) {
            let n = d.len() / ts * fs;
            let t = &mut tmp[..n];
            f.read_at(off + done, t)?;
            convert(t, self.from, d, self.to)?;
            done += n;
        }
        Ok(())
    }

    fn internal(&self) -> Error {
        Error::internal(format!("{}: {}", self.what, out_of_bounds().message()))
    }
}

fn out_of_bounds() -> Error {
    Error::internal("piece range out of bounds")
}

impl ByteSource for TensorPieces<'_> {
    fn len(&self) -> usize {
        self.len
    }

    fn read_into(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        let range = checked_source_range(offset, dst.len(), self.len)?;
        let (fs, ts) = (self.from.element_size(), self.to.element_size());
        if !offset.is_multiple_of(ts) || !dst.len().is_multiple_of(ts) {
            return Err(Error::internal(format!(
                "{}: read of {} bytes at {offset} splits {} elements",
                self.what,
                dst.len(),
                self.to
            )));
        }
        let mut i = self.pieces.partition_point(|p| p.at + p.out_len <= offset);
        let mut pos = offset;
        while pos < range.end {
            let p = self.pieces.get(i).ok_or_else(|| self.internal())?;
            let a = pos.checked_sub(p.at).ok_or_else(|| self.internal())?;
            let b = (range.end - p.at).min(p.out_len);
            let d = dst
                .get_mut(pos - offset..p.at + b - offset)
                .ok_or_else(|| self.internal())?;
            self.read_piece(p, a / ts * fs..b / ts * fs, d)
                .map_err(|e| Error::new(e.code(), format!("{}: {}", self.what, e.message())))?;
            pos = p.at + b;
            i += 1;
        }
        Ok(())
    }

    fn as_slice(&self) -> Option<&[u8]> {
        // Only an aligned copy in memory: bytes of a mapped file are read with `pread`, so
        // copies do not map the file's pages.
        match self.pieces.as_slice() {
            [p] if self.from == self.to && p.file.is_none() => Some(p.bytes),
            [] => Some(&[]),
            _ => None,
        }
    }

    fn prefetch(&self, offset: usize, len: usize) {
        let (fs, ts) = (self.from.element_size(), self.to.element_size());
        let end = offset.saturating_add(len).min(self.len);
        let first = self.pieces.partition_point(|p| p.at + p.out_len <= offset);
        for p in self.pieces.iter().skip(first).take_while(|p| p.at < end) {
            if let Some((f, base)) = p.file {
                let a = offset.saturating_sub(p.at) / ts * fs;
                let b = (end - p.at).min(p.out_len) / ts * fs;
                f.prefetch(base + a, b.saturating_sub(a));
            }
        }
    }
}
