//! Writing `.pte` files: a [`pte::Program`] plus its segment data, laid out as
//! executorch's `serialize_pte_binary` lays it out: the flatbuffer (identifier `ET12`) with
//! the extended header (`eh00`) inserted after its first 8 bytes, then the segments, each
//! aligned to the segment alignment (128 by default), at offsets relative to the segment
//! base.

use crate::program::{EXTENDED_HEADER_MAGIC, PROGRAM_IDENTIFIER};
use crate::schema::pte;
use crate::{Program, fb_err};
use etch_core::{Error, Result};

/// How a program is written.
#[derive(Debug, Clone, Copy)]
pub struct WriteOptions {
    /// Alignment of every segment in the file (upstream's default is 128).
    pub segment_alignment: usize,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            segment_alignment: 128,
        }
    }
}

/// A program in editable form: the decoded flatbuffer tables and the bytes of each segment.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgramParts {
    /// The program tables. `segments` is recomputed on write.
    pub program: pte::Program,
    /// The data of each segment, in `program.segments` order.
    pub segments: Vec<Vec<u8>>,
}

impl ProgramParts {
    /// Decodes a loaded program (every table is read and checked).
    pub fn from_program(p: &Program) -> Result<ProgramParts> {
        let program = pte::Program::try_from(p.flatbuffer()?).map_err(fb_err("program tables"))?;
        let segments = (0..p.num_segments())
            .map(|i| p.segment(i).map(|s| s.to_vec()))
            .collect::<Result<_>>()?;
        Ok(ProgramParts { program, segments })
    }

    /// True when constants are kept inline (the deprecated `constant_buffer` layout),
    /// which this writer does not write.
    pub fn has_inline_constants(&self) -> bool {
        self.program
            .constant_buffer
            .iter()
            .flatten()
            .any(|b| b.storage.as_ref().is_some_and(|s| !s.is_empty()))
    }

    /// Serializes to `.pte` bytes.
    pub fn to_bytes(&self, opts: WriteOptions) -> Result<Vec<u8>> {
        let align = opts.segment_alignment;
        if !align.is_power_of_two() {
            return Err(Error::invalid_argument(format!(
                "segment alignment {align} is not a power of two"
            )));
        }
        // planus does not honour the schema's `force_align: 16` on byte vectors, so inline
        // constant tensors (the pre-2024 `constant_buffer` layout) could end up misaligned.
        // Programs keep constants in the constant segment since then.
        if self.has_inline_constants() {
            return Err(Error::not_supported(
                "writing inline constant buffers (the deprecated constant_buffer layout) is not supported; move constants to the constant segment",
            ));
        }
        // Segment offsets, relative to the segment base.
        let mut program = self.program.clone();
        let mut table = Vec::with_capacity(self.segments.len());
        let mut end = 0usize;
        for s in &self.segments {
            let offset = end.next_multiple_of(align);
            table.push(pte::DataSegment {
                offset: offset as u64,
                size: s.len() as u64,
            });
            end = offset + s.len();
        }
        program.segments = Some(table);

        let mut builder = planus::Builder::new();
        let mut fb = builder.finish(&program, Some(*PROGRAM_IDENTIFIER)).to_vec();
        // planus 1.3 writes `[identifier][root offset relative to byte 4]`; flatbuffers (and
        // ExecuTorch) expect `[root offset relative to byte 0][identifier]`.
        if fb.len() < 8 || &fb[0..4] != PROGRAM_IDENTIFIER {
            return Err(Error::internal(
                "unexpected flatbuffer prefix from the builder",
            ));
        }
        let root = u32::from_le_bytes([fb[4], fb[5], fb[6], fb[7]]) + 4;
        fb[0..4].copy_from_slice(&root.to_le_bytes());
        fb[4..8].copy_from_slice(PROGRAM_IDENTIFIER);
        if self.segments.is_empty() {
            return Ok(fb);
        }
        // Insert the extended header after the root offset and identifier; everything after
        // it moves by the same amount, so only the root offset changes. 32 bytes keeps the
        // flatbuffer's internal alignment (its largest is 16).
        const HEADER_LEN: usize = 32;
        let program_size = fb.len() + HEADER_LEN;
        let base = program_size.next_multiple_of(align);
        let mut out = Vec::with_capacity(base + end);
        let root = u32::from_le_bytes([fb[0], fb[1], fb[2], fb[3]]) as usize + HEADER_LEN;
        let root = u32::try_from(root).map_err(|_| Error::invalid_argument("program too large"))?;
        out.extend_from_slice(&root.to_le_bytes());
        out.extend_from_slice(&fb[4..8]);
        out.extend_from_slice(EXTENDED_HEADER_MAGIC);
        out.extend_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        out.extend_from_slice(&(program_size as u64).to_le_bytes());
        out.extend_from_slice(&(base as u64).to_le_bytes());
        out.extend_from_slice(&(end as u64).to_le_bytes());
        out.extend_from_slice(&fb[8..]);
        debug_assert_eq!(out.len(), program_size);
        for s in &self.segments {
            out.resize(out.len().next_multiple_of(align).max(base), 0);
            out.extend_from_slice(s);
        }
        Ok(out)
    }
}
