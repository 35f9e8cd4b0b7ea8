//! Hugging Face `.safetensors` checkpoints as named data: a program exported with
//! external constants (`ExecutorchBackendConfig(external_constants=True)`) names each
//! weight by its fully qualified name, which is the key a `state_dict` saved with
//! `safetensors` (or `save_pretrained`) uses. Files are memory-mapped; tensors are views.

use crate::{DataSource, NamedBlob, NamedDataMap, TensorLayout};
use etch_core::{AlignedBuf, Error, Result, ScalarType};
use safetensors::tensor::{Dtype, SafeTensors};
use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

enum Bytes {
    /// A range of file `usize`.
    Mapped(usize, Range<usize>),
    /// An aligned copy (the file's bytes were not aligned for the dtype).
    Copied(AlignedBuf),
}

struct Entry {
    bytes: Bytes,
    layout: TensorLayout,
}

/// The tensors of one or more `.safetensors` files.
pub struct Safetensors {
    files: Vec<Arc<DataSource>>,
    entries: HashMap<String, Entry>,
}

impl std::fmt::Debug for Safetensors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Safetensors")
            .field("files", &self.files.len())
            .field("tensors", &self.entries.len())
            .finish()
    }
}

fn dtype(d: Dtype) -> Option<ScalarType> {
    Some(match d {
        Dtype::BOOL => ScalarType::Bool,
        Dtype::U8 => ScalarType::Byte,
        Dtype::I8 => ScalarType::Char,
        Dtype::I16 => ScalarType::Short,
        Dtype::I32 => ScalarType::Int,
        Dtype::I64 => ScalarType::Long,
        Dtype::F16 => ScalarType::Half,
        Dtype::BF16 => ScalarType::BFloat16,
        Dtype::F32 => ScalarType::Float,
        Dtype::F64 => ScalarType::Double,
        _ => return None,
    })
}

/// The `.safetensors` files of `path`: the file itself, or every such file in the folder
/// (sorted; `model.safetensors.index.json` is not needed, shards are found by name).
fn files_of(path: &Path) -> Result<Vec<PathBuf>> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let rd = std::fs::read_dir(path)
        .map_err(|e| Error::access_failed(format!("cannot read '{}': {e}", path.display())))?;
    let mut v: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    v.sort();
    if v.is_empty() {
        return Err(Error::not_found(format!(
            "no .safetensors file in '{}'",
            path.display()
        )));
    }
    Ok(v)
}

impl Safetensors {
    /// Maps a `.safetensors` file or every one in a folder (a sharded checkpoint).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let mut s = Safetensors {
            files: Vec::new(),
            entries: HashMap::new(),
        };
        for f in files_of(path.as_ref())? {
            let src = Arc::new(DataSource::map_file(&f)?);
            s.add(src, &f.display().to_string())?;
        }
        Ok(s)
    }

    /// Adds the tensors of one file's bytes (`name` for messages).
    pub fn add(&mut self, src: Arc<DataSource>, name: &str) -> Result<()> {
        let bytes = src.bytes();
        let st = SafeTensors::deserialize(bytes).map_err(|e| {
            Error::invalid_program(format!("{name}: not a valid safetensors file: {e}"))
        })?;
        let fi = self.files.len();
        let base = bytes.as_ptr() as usize;
        for (key, view) in st.tensors() {
            let dt = dtype(view.dtype()).ok_or_else(|| {
                Error::not_supported(format!(
                    "{name}: tensor '{key}' has dtype {:?}, which etch does not load",
                    view.dtype()
                ))
            })?;
            let data = view.data();
            let start = data.as_ptr() as usize - base;
            let range = start..start + data.len();
            let aligned = (data.as_ptr() as usize).is_multiple_of(dt.element_size());
            let layout = TensorLayout {
                dtype: dt,
                sizes: view.shape().iter().map(|&v| v as i64).collect(),
                dim_order: (0..view.shape().len() as u8).collect(),
            };
            let bytes = if aligned {
                Bytes::Mapped(fi, range)
            } else {
                Bytes::Copied(AlignedBuf::from_bytes(data)?)
            };
            if self
                .entries
                .insert(key.clone(), Entry { bytes, layout })
                .is_some()
            {
                return Err(Error::invalid_program(format!(
                    "{name}: tensor '{key}' appears in more than one file"
                )));
            }
        }
        self.files.push(src);
        Ok(())
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no tensors.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl NamedDataMap for Safetensors {
    fn get(&self, key: &str) -> Option<NamedBlob<'_>> {
        let e = self.entries.get(key)?;
        let data = match &e.bytes {
            Bytes::Mapped(f, r) => &self.files[*f].bytes()[r.clone()],
            Bytes::Copied(b) => b.as_slice(),
        };
        Some(NamedBlob {
            data,
            layout: Some(&e.layout),
        })
    }
    fn keys(&self) -> Vec<&str> {
        let mut k: Vec<&str> = self.entries.keys().map(|s| s.as_str()).collect();
        k.sort_unstable();
        k
    }
}
