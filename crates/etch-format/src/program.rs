//! The verified view of a `.pte` program.

use crate::schema::pte;
use crate::{DataSource, checked_range, fb_err};
use etch_core::{Error, Result, ScalarType};
use planus::ReadAsRoot;
use std::ops::Range;
use std::sync::Arc;

/// The flatbuffer file identifier of programs etch reads.
pub const PROGRAM_IDENTIFIER: &[u8; 4] = b"ET12";
/// Magic of the extended header that follows the flatbuffer's first 8 bytes.
pub const EXTENDED_HEADER_MAGIC: &[u8; 4] = b"eh00";
const EXTENDED_HEADER_MIN_LEN: u32 = 24;

/// The optional extended header (`eh00`) at byte offset 8 of a `.pte`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtendedHeader {
    /// Length of the header in bytes.
    pub length: u32,
    /// Size of the flatbuffer part of the file.
    pub program_size: u64,
    /// Offset of the first segment from the start of the file (0 when none).
    pub segment_base_offset: u64,
    /// Size of all segment data (0 when unknown).
    pub segment_data_size: u64,
}

fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn le_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

impl ExtendedHeader {
    /// Reads the header at offset 8 if its magic is present. `Ok(None)` when the file has
    /// none; an error when the magic is there but the fields are inconsistent.
    pub fn parse(file: &[u8], magic: &[u8; 4]) -> Result<Option<Self>> {
        if file.get(8..12) != Some(&magic[..]) {
            return Ok(None);
        }
        let short = || Error::invalid_program("file too small for its extended header");
        let length = le_u32(file, 12).ok_or_else(short)?;
        if length < EXTENDED_HEADER_MIN_LEN {
            return Err(Error::invalid_program(format!(
                "extended header length {length} is below the minimum {EXTENDED_HEADER_MIN_LEN}"
            )));
        }
        let program_size = le_u64(file, 16).ok_or_else(short)?;
        let segment_base_offset = le_u64(file, 24).ok_or_else(short)?;
        let segment_data_size = if length > EXTENDED_HEADER_MIN_LEN {
            le_u64(file, 32).ok_or_else(short)?
        } else {
            0
        };
        Ok(Some(ExtendedHeader {
            length,
            program_size,
            segment_base_offset,
            segment_data_size,
        }))
    }
}

/// Shape and type of a named tensor in a `.ptd` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorLayout {
    /// Element type.
    pub dtype: ScalarType,
    /// Sizes.
    pub sizes: Vec<i64>,
    /// Dim order.
    pub dim_order: Vec<u8>,
}

/// A loaded, verified `.pte` program. Cheap to clone (the bytes are shared).
#[derive(Clone)]
pub struct Program {
    source: Arc<DataSource>,
    header: Option<ExtendedHeader>,
    flatbuffer_len: usize,
    segments: Arc<[Range<usize>]>,
    method_names: Arc<[String]>,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("bytes", &self.bytes().len())
            .field("header", &self.header)
            .field("segments", &self.segments.len())
            .field("methods", &self.method_names)
            .finish()
    }
}

impl Program {
    /// Verifies and wraps program bytes.
    ///
    /// Checks the identifier, the extended header, that the flatbuffer's root is readable,
    /// that every segment lies inside the file, and that every method has a name.
    pub fn load(source: Arc<DataSource>) -> Result<Self> {
        let keep = Arc::clone(&source);
        let bytes = keep.bytes();
        if bytes.len() < 8 {
            return Err(Error::invalid_program(format!(
                "file is {} bytes; too small to be an ExecuTorch program",
                bytes.len()
            )));
        }
        if &bytes[4..8] != PROGRAM_IDENTIFIER {
            return Err(Error::invalid_program(format!(
                "not an ExecuTorch program: file identifier is {:?}, expected \"ET12\"",
                String::from_utf8_lossy(&bytes[4..8])
            )));
        }
        let header = ExtendedHeader::parse(bytes, EXTENDED_HEADER_MAGIC)?;
        let flatbuffer_len = match header {
            Some(h) => {
                checked_range(0, h.program_size, bytes.len(), "flatbuffer")?;
                h.program_size as usize
            }
            None => bytes.len(),
        };
        let fb = pte::ProgramRef::read_as_root(&bytes[..flatbuffer_len])
            .map_err(fb_err("program root"))?;

        let mut segments = Vec::new();
        if let Some(segs) = fb.segments().map_err(fb_err("segment table"))? {
            // Without an extended header there is no segment data; the exporter still
            // writes empty segments (e.g. with external constants). Every range is checked
            // against the file, so base 0 is safe.
            let base = header.map_or(0, |h| h.segment_base_offset);
            for (i, s) in segs.iter().enumerate() {
                let s = s.map_err(fb_err("segment"))?;
                let off = s.offset().map_err(fb_err("segment offset"))?;
                let size = s.size().map_err(fb_err("segment size"))?;
                let start = base.checked_add(off).ok_or_else(|| {
                    Error::invalid_program(format!("segment {i} offset overflows"))
                })?;
                segments.push(checked_range(
                    start,
                    size,
                    bytes.len(),
                    &format!("segment {i}"),
                )?);
            }
        }
        Self::finish(source, header, flatbuffer_len, segments, fb)
    }

    fn finish(
        source: Arc<DataSource>,
        header: Option<ExtendedHeader>,
        flatbuffer_len: usize,
        segments: Vec<Range<usize>>,
        fb: pte::ProgramRef<'_>,
    ) -> Result<Self> {
        let plans = fb
            .execution_plan()
            .map_err(fb_err("execution plan list"))?
            .ok_or_else(|| Error::invalid_program("program has no execution plans"))?;
        let mut names = Vec::with_capacity(plans.len());
        for p in plans.iter() {
            let p = p.map_err(fb_err("execution plan"))?;
            let name = p
                .name()
                .map_err(fb_err("method name"))?
                .ok_or_else(|| Error::invalid_program("a method has no name"))?;
            names.push(name.to_string());
        }
        Ok(Program {
            source,
            header,
            flatbuffer_len,
            segments: segments.into(),
            method_names: names.into(),
        })
    }

    /// Maps a file and loads it.
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<Self> {
        Self::load(Arc::new(DataSource::map_file(path.as_ref())?))
    }

    /// Copies bytes into aligned memory and loads them.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        Self::load(Arc::new(DataSource::copy_from(bytes)?))
    }

    /// All bytes of the file.
    pub fn bytes(&self) -> &[u8] {
        self.source.bytes()
    }

    /// The shared data source (kept alive by anything that borrows constants).
    pub fn source(&self) -> &Arc<DataSource> {
        &self.source
    }

    /// The extended header, if the file has one.
    pub fn header(&self) -> Option<ExtendedHeader> {
        self.header
    }

    /// The flatbuffer root. Verified readable at load; each field access is checked.
    pub fn flatbuffer(&self) -> Result<pte::ProgramRef<'_>> {
        pte::ProgramRef::read_as_root(&self.bytes()[..self.flatbuffer_len])
            .map_err(fb_err("program root"))
    }

    /// Size of the flatbuffer part.
    pub fn flatbuffer_len(&self) -> usize {
        self.flatbuffer_len
    }

    /// Method names, in file order.
    pub fn method_names(&self) -> &[String] {
        &self.method_names
    }

    /// The execution plan of a method.
    pub fn plan(&self, name: &str) -> Result<pte::ExecutionPlanRef<'_>> {
        let idx = self
            .method_names
            .iter()
            .position(|n| n == name)
            .ok_or_else(|| {
                Error::not_found(format!(
                    "no method '{name}' in the program (methods: {})",
                    self.method_names.join(", ")
                ))
            })?;
        let plans = self
            .flatbuffer()?
            .execution_plan()
            .map_err(fb_err("execution plan list"))?
            .ok_or_else(|| Error::invalid_program("program has no execution plans"))?;
        plans
            .get(idx)
            .ok_or_else(|| Error::invalid_program("execution plan vanished"))?
            .map_err(fb_err("execution plan"))
    }

    /// Number of segments.
    pub fn num_segments(&self) -> usize {
        self.segments.len()
    }

    /// The bytes of segment `i`.
    pub fn segment(&self, i: usize) -> Result<&[u8]> {
        let r = self.segments.get(i).ok_or_else(|| {
            Error::invalid_program(format!(
                "segment index {i} out of range ({} segments)",
                self.segments.len()
            ))
        })?;
        Ok(&self.bytes()[r.clone()])
    }

    /// Total bytes of constant tensor data (inline buffers or the constant segment).
    pub fn constant_bytes(&self) -> Result<usize> {
        let fb = self.flatbuffer()?;
        let mut total = 0usize;
        if let Some(bufs) = fb.constant_buffer().map_err(fb_err("constant buffers"))? {
            for b in bufs.iter() {
                let b = b.map_err(fb_err("constant buffer"))?;
                total += b
                    .storage()
                    .map_err(fb_err("constant buffer"))?
                    .map_or(0, |s| s.len());
            }
        }
        if let Some(cs) = fb.constant_segment().map_err(fb_err("constant segment"))?
            && cs
                .offsets()
                .map_err(fb_err("constant offsets"))?
                .is_some_and(|o| o.len() > 1)
        {
            let seg = cs
                .segment_index()
                .map_err(fb_err("constant segment index"))? as usize;
            total += self.segment(seg)?.len();
        }
        Ok(total)
    }

    /// The bytes of constant `data_buffer_idx` (at least `nbytes` of them).
    ///
    /// Old files keep constants inline (`constant_buffer`); current ones in the constant
    /// segment at `constant_segment.offsets[idx]`.
    pub fn constant(&self, data_buffer_idx: u32, nbytes: usize) -> Result<&[u8]> {
        let fb = self.flatbuffer()?;
        let idx = data_buffer_idx as usize;
        if let Some(bufs) = fb.constant_buffer().map_err(fb_err("constant buffers"))?
            && !bufs.is_empty()
        {
            let b = bufs
                .get(idx)
                .ok_or_else(|| {
                    Error::invalid_program(format!(
                        "constant buffer index {idx} out of range ({})",
                        bufs.len()
                    ))
                })?
                .map_err(fb_err("constant buffer"))?;
            let storage = b
                .storage()
                .map_err(fb_err("constant buffer"))?
                .unwrap_or(&[]);
            if storage.len() < nbytes {
                return Err(Error::invalid_program(format!(
                    "constant buffer {idx} holds {} bytes; the tensor needs {nbytes}",
                    storage.len()
                )));
            }
            return Ok(&storage[..nbytes]);
        }
        let cs = fb
            .constant_segment()
            .map_err(fb_err("constant segment"))?
            .ok_or_else(|| Error::invalid_program("program has constants but no constant data"))?;
        let seg = cs
            .segment_index()
            .map_err(fb_err("constant segment index"))? as usize;
        let offsets = cs
            .offsets()
            .map_err(fb_err("constant offsets"))?
            .ok_or_else(|| Error::invalid_program("constant segment has no offsets"))?;
        let off = offsets.get(idx).ok_or_else(|| {
            Error::invalid_program(format!(
                "constant index {idx} out of range ({} constants)",
                offsets.len()
            ))
        })?;
        let data = self.segment(seg)?;
        let r = checked_range(off, nbytes as u64, data.len(), &format!("constant {idx}"))?;
        Ok(&data[r])
    }

    /// The initial bytes of a mutable tensor (`mutable_data_segments[list_idx]`, entry
    /// `data_buffer_idx`).
    pub fn mutable_data(
        &self,
        list_idx: u64,
        data_buffer_idx: u32,
        nbytes: usize,
    ) -> Result<&[u8]> {
        let fb = self.flatbuffer()?;
        let lists = fb
            .mutable_data_segments()
            .map_err(fb_err("mutable data segments"))?
            .ok_or_else(|| {
                Error::invalid_program("tensor has initial state but no mutable data")
            })?;
        let li = usize::try_from(list_idx).unwrap_or(usize::MAX);
        let sub = lists
            .get(li)
            .ok_or_else(|| {
                Error::invalid_program(format!("mutable data segment list {list_idx} out of range"))
            })?
            .map_err(fb_err("mutable data segment"))?;
        let seg = sub
            .segment_index()
            .map_err(fb_err("mutable segment index"))? as usize;
        let offsets = sub
            .offsets()
            .map_err(fb_err("mutable offsets"))?
            .ok_or_else(|| Error::invalid_program("mutable data segment has no offsets"))?;
        let off = offsets.get(data_buffer_idx as usize).ok_or_else(|| {
            Error::invalid_program(format!(
                "mutable data index {data_buffer_idx} out of range ({})",
                offsets.len()
            ))
        })?;
        let data = self.segment(seg)?;
        let r = checked_range(off, nbytes as u64, data.len(), "mutable tensor data")?;
        Ok(&data[r])
    }

    /// The processed blob of a delegate: inline data or a segment.
    pub fn delegate_data(&self, r: &pte::BackendDelegateDataReferenceRef<'_>) -> Result<&[u8]> {
        let loc = r.location().map_err(fb_err("delegate data location"))?;
        let idx = r.index().map_err(fb_err("delegate data index"))? as usize;
        match loc {
            pte::DataLocation::Inline => {
                let list = self
                    .flatbuffer()?
                    .backend_delegate_data()
                    .map_err(fb_err("delegate data"))?
                    .ok_or_else(|| Error::invalid_program("no inline delegate data"))?;
                let d = list
                    .get(idx)
                    .ok_or_else(|| {
                        Error::invalid_program(format!(
                            "inline delegate data index {idx} out of range ({})",
                            list.len()
                        ))
                    })?
                    .map_err(fb_err("delegate data"))?;
                Ok(d.data().map_err(fb_err("delegate data"))?.unwrap_or(&[]))
            }
            pte::DataLocation::Segment => self.segment(idx),
        }
    }

    /// The processed blob of delegate `index` of method `method`.
    pub fn delegate_blob(&self, method: &str, index: usize) -> Result<&[u8]> {
        let plan = self.plan(method)?;
        let d = plan
            .delegates()
            .map_err(fb_err("delegates"))?
            .and_then(|ds| ds.get(index))
            .ok_or_else(|| Error::not_found(format!("method '{method}' has no delegate {index}")))?
            .map_err(fb_err("delegate"))?;
        let r = d
            .processed()
            .map_err(fb_err("delegate data reference"))?
            .ok_or_else(|| Error::invalid_program(format!("delegate {index} has no data")))?;
        self.delegate_data(&r)
    }

    /// Named data stored in this program's segments (`Program.named_data`).
    pub fn named_data(&self, key: &str) -> Result<Option<&[u8]>> {
        let Some(list) = self
            .flatbuffer()?
            .named_data()
            .map_err(fb_err("named data"))?
        else {
            return Ok(None);
        };
        for nd in list.iter() {
            let nd = nd.map_err(fb_err("named data entry"))?;
            if nd.key().map_err(fb_err("named data key"))? == Some(key) {
                let seg = nd.segment_index().map_err(fb_err("named data segment"))? as usize;
                return self.segment(seg).map(Some);
            }
        }
        Ok(None)
    }

    /// Keys of the named data stored in this program.
    pub fn named_data_keys(&self) -> Result<Vec<String>> {
        let mut keys = Vec::new();
        if let Some(list) = self
            .flatbuffer()?
            .named_data()
            .map_err(fb_err("named data"))?
        {
            for nd in list.iter() {
                let nd = nd.map_err(fb_err("named data entry"))?;
                if let Some(k) = nd.key().map_err(fb_err("named data key"))? {
                    keys.push(k.to_string());
                }
            }
        }
        Ok(keys)
    }
}
