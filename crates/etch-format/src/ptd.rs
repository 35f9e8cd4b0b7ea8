//! External data files (`.ptd`, ExecuTorch's flat_tensor format) and the named-data map
//! through which methods find external constants.

use crate::schema::ptd;
use crate::{DataSource, TensorLayout, checked_range, fb_err};
use etch_core::{ByteSource, Error, Result, ScalarType};
use planus::ReadAsRoot;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

const PTD_IDENTIFIER: &[u8; 4] = b"FT01";
const PTD_HEADER_MAGIC: &[u8; 4] = b"FH01";

/// A named blob: its bytes and, for tensors, their layout.
#[derive(Debug, Clone, Copy)]
pub struct NamedBlob<'a> {
    /// The bytes.
    pub data: &'a [u8],
    /// The tensor layout, when the file records one.
    pub layout: Option<&'a TensorLayout>,
}

/// Named data, looked up by key (e.g. a tensor's fully qualified name).
pub trait NamedDataMap: Send + Sync {
    /// The blob for `key`, or `None` when this map does not have it.
    fn get(&self, key: &str) -> Option<NamedBlob<'_>>;
    /// All keys.
    fn keys(&self) -> Vec<&str>;
    /// The bytes of the tensor `key` that the program declares with layout `expected`.
    ///
    /// The runtime looks external constants up through this method. A map may use the
    /// expected layout to build the tensor (a checkpoint stacks per-expert weights or
    /// converts dtypes, see [`crate::Safetensors`]) and to report a mismatch in its own
    /// terms. `Ok(None)`, or an error with code `NotFound`, means this map does not have
    /// the tensor (a chain of maps then asks the next one); any other error means it has
    /// something under that name that cannot be used. The default is [`NamedDataMap::get`].
    fn get_tensor(&self, key: &str, expected: &TensorLayout) -> Result<Option<NamedBlob<'_>>> {
        let _ = expected;
        Ok(self.get(key))
    }
    /// The tensor `key` for a copy to a device: [`NamedDataMap::get_tensor`]'s bytes, or
    /// a source that produces them on demand, so a map that would have to build the tensor
    /// (stack per-expert weights, convert a dtype) need not build it in host memory. The
    /// same `Ok(None)` / `NotFound` convention. The default wraps `get_tensor`.
    fn get_tensor_source(
        &self,
        key: &str,
        expected: &TensorLayout,
    ) -> Result<Option<TensorSource<'_>>> {
        Ok(self.get_tensor(key, expected)?.map(TensorSource::from))
    }
}

/// A tensor's bytes for a copy to a device, produced on demand ([`ByteSource`]), and its
/// layout when the map records one.
pub struct TensorSource<'a> {
    /// The bytes.
    pub bytes: Box<dyn ByteSource + 'a>,
    /// The layout.
    pub layout: Option<TensorLayout>,
}

impl std::fmt::Debug for TensorSource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorSource")
            .field("len", &self.bytes.len())
            .field("layout", &self.layout)
            .finish()
    }
}

impl<'a> From<NamedBlob<'a>> for TensorSource<'a> {
    fn from(b: NamedBlob<'a>) -> Self {
        TensorSource {
            bytes: Box::new(b.data),
            layout: b.layout.cloned(),
        }
    }
}

/// A loaded, verified `.ptd` file.
pub struct PtdFile {
    source: Arc<DataSource>,
    entries: HashMap<String, (Range<usize>, Option<TensorLayout>)>,
}

impl std::fmt::Debug for PtdFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PtdFile")
            .field("entries", &self.entries.len())
            .finish()
    }
}

impl PtdFile {
    /// Maps and verifies a `.ptd` file.
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<Self> {
        Self::load(Arc::new(DataSource::map_file(path.as_ref())?))
    }

    /// Verifies `.ptd` bytes (copied into aligned memory).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        Self::load(Arc::new(DataSource::copy_from(bytes)?))
    }

    /// Verifies a `.ptd` data source: identifier, header, and every entry's range.
    pub fn load(source: Arc<DataSource>) -> Result<Self> {
        let bytes = source.bytes();
        if bytes.len() < 8 || &bytes[4..8] != PTD_IDENTIFIER {
            return Err(Error::invalid_program(
                "not an ExecuTorch data file (.ptd): file identifier is not \"FT01\"",
            ));
        }
        // FH01 header at offset 8: magic, u32 length, then u64 flatbuffer_offset,
        // flatbuffer_size, segment_base_offset, segment_data_size.
        if bytes.get(8..12) != Some(&PTD_HEADER_MAGIC[..]) {
            return Err(Error::invalid_program(".ptd file has no FH01 header"));
        }
        let field = |at: usize| -> Result<u64> {
            let b = bytes
                .get(at..at + 8)
                .ok_or_else(|| Error::invalid_program(".ptd header truncated"))?;
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            Ok(u64::from_le_bytes(a))
        };
        let fb_offset = field(16)?;
        let fb_size = field(24)?;
        let seg_base = field(32)?;
        let fb_end = checked_range(
            0,
            fb_offset.saturating_add(fb_size),
            bytes.len(),
            "flatbuffer",
        )?;
        let root = ptd::FlatTensorRef::read_as_root(&bytes[fb_end]).map_err(fb_err(".ptd root"))?;
        let mut seg_ranges = Vec::new();
        if let Some(segs) = root.segments().map_err(fb_err(".ptd segments"))? {
            for (i, s) in segs.iter().enumerate() {
                let s = s.map_err(fb_err(".ptd segment"))?;
                let off = s.offset().map_err(fb_err(".ptd segment"))?;
                let size = s.size().map_err(fb_err(".ptd segment"))?;
                let start = seg_base
                    .checked_add(off)
                    .ok_or_else(|| Error::invalid_program(format!(".ptd segment {i} overflows")))?;
                seg_ranges.push(checked_range(
                    start,
                    size,
                    bytes.len(),
                    &format!(".ptd segment {i}"),
                )?);
            }
        }
        let mut entries = HashMap::new();
        if let Some(nds) = root.named_data().map_err(fb_err(".ptd named data"))? {
            for nd in nds.iter() {
                let nd = nd.map_err(fb_err(".ptd named data"))?;
                let key = nd
                    .key()
                    .map_err(fb_err(".ptd key"))?
                    .ok_or_else(|| Error::invalid_program(".ptd entry without a key"))?;
                let si = nd.segment_index().map_err(fb_err(".ptd segment index"))? as usize;
                let range = seg_ranges.get(si).cloned().ok_or_else(|| {
                    Error::invalid_program(format!(
                        ".ptd entry '{key}' names segment {si} of {}",
                        seg_ranges.len()
                    ))
                })?;
                let layout = match nd.tensor_layout().map_err(fb_err(".ptd layout"))? {
                    Some(l) => {
                        let dtype = ScalarType::from_i8(
                            l.scalar_type().map_err(fb_err(".ptd scalar type"))? as i8,
                        )?;
                        let sizes = l
                            .sizes()
                            .map_err(fb_err(".ptd sizes"))?
                            .map(|v| v.iter().map(i64::from).collect())
                            .unwrap_or_default();
                        let dim_order = l
                            .dim_order()
                            .map_err(fb_err(".ptd dim order"))?
                            .unwrap_or(&[])
                            .to_vec();
                        Some(TensorLayout {
                            dtype,
                            sizes,
                            dim_order,
                        })
                    }
                    None => None,
                };
                entries.insert(key.to_string(), (range, layout));
            }
        }
        Ok(PtdFile { source, entries })
    }
}

impl NamedDataMap for PtdFile {
    fn get(&self, key: &str) -> Option<NamedBlob<'_>> {
        let (r, layout) = self.entries.get(key)?;
        Some(NamedBlob {
            data: &self.source.bytes()[r.clone()],
            layout: layout.as_ref(),
        })
    }
    fn keys(&self) -> Vec<&str> {
        let mut k: Vec<&str> = self.entries.keys().map(|s| s.as_str()).collect();
        k.sort_unstable();
        k
    }
}
