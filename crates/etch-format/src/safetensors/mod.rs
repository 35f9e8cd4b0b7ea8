//! Hugging Face `.safetensors` checkpoints as named data: a program exported with
//! external constants (`ExecutorchBackendConfig(external_constants=True)`) names each
//! weight by its fully qualified name, which is the key a `state_dict` saved with
//! `safetensors` (or `save_pretrained`) uses. Files are memory-mapped; tensors are views,
//! except where the checkpoint stores a weight differently from the program (per-expert
//! weights the program stacks, another float dtype with [`WeightOptions::convert_dtype`]):
//! for host kernels those are built once, on first request, into an aligned buffer the
//! checkpoint owns; for a copy to a device they are described as pieces of the files
//! ([`TensorPieces`]) that the device's staging copy reads chunk by chunk, with no host
//! copy of the whole. The name mapping is in `hf_names`.

mod convert;
mod hf_names;
mod pieces;
mod resolve;
#[cfg(test)]
mod tests;

use crate::{DataSource, TensorLayout};
use etch_core::{AlignedBuf, Error, Result, ScalarType};
use hf_names::StackKind;
pub use pieces::TensorPieces;
use safetensors::tensor::{Dtype, SafeTensors};
use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// How a checkpoint may adapt its tensors to the program.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WeightOptions {
    /// Convert floating-point tensors between float32, bfloat16 and float16 to the dtype
    /// the program declares (rounding to nearest even, as `Tensor.to` does), into memory
    /// the checkpoint owns. Off by default: a dtype mismatch is then an error.
    pub convert_dtype: bool,
}

enum Bytes {
    /// A range of file `usize`.
    Mapped(usize, Range<usize>),
    /// An aligned copy (the file's bytes were not aligned for the dtype).
    Copied(AlignedBuf),
}

/// A tensor built for the program: stacked experts or a converted dtype.
struct Built {
    layout: TensorLayout,
    buf: AlignedBuf,
}

/// Tensors built from one source: one per float dtype, one in the source's own dtype
/// (requested without a layout) and one in another dtype.
#[derive(Default)]
struct Cache([OnceLock<Built>; 5]);

impl Cache {
    fn slot(&self, d: Option<ScalarType>) -> &OnceLock<Built> {
        &self.0[match d {
            Some(ScalarType::Float) => 0,
            Some(ScalarType::BFloat16) => 1,
            Some(ScalarType::Half) => 2,
            Some(_) => 3,
            None => 4,
        }]
    }
}

struct Entry {
    bytes: Bytes,
    /// The layout, or the name of a dtype etch does not load (an error only if requested).
    layout: std::result::Result<TensorLayout, String>,
    converted: Cache,
}

/// Per-expert tensors that make up a stacked expert weight the checkpoint lacks.
struct Stack {
    kind: StackKind,
    /// `...mlp.experts`.
    prefix: String,
    /// One more than the highest expert index seen.
    experts: usize,
    built: Cache,
}

/// `model.safetensors.index.json`: which shard holds each tensor.
struct Index {
    /// The index file, for messages.
    path: String,
    weight_map: HashMap<String, String>,
    /// Shards that could not be read, with the reason.
    failed: HashMap<String, Error>,
}

/// The tensors of a Hugging Face checkpoint: one `.safetensors` file or a folder of shards.
///
/// A program's tensor is looked up by its name, then by the names the `hf_names` rules
/// derive from it: `model.X` as `model.language_model.X` (multimodal checkpoints), stacked
/// expert weights `P.experts.gate_up_proj` / `P.experts.down_proj` from per-expert
/// `P.experts.E.{gate,up,down}_proj.weight`, and `lm_head.weight` as the embedding when
/// `config.json` ties them. Other tensors (vision towers, `mtp.*`) are never read. Dtype,
/// shape and dim order are checked against the program, with errors naming the tensor.
pub struct Safetensors {
    files: Vec<Arc<DataSource>>,
    entries: HashMap<String, Entry>,
    stacks: HashMap<String, Stack>,
    index: Option<Index>,
    tied_embeddings: bool,
    options: WeightOptions,
    /// Held while a tensor is built, so each is built once.
    building: Mutex<()>,
}

impl std::fmt::Debug for Safetensors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Safetensors")
            .field("files", &self.files.len())
            .field("tensors", &self.entries.len())
            .field("stacked", &self.stacks.len())
            .field("tied_embeddings", &self.tied_embeddings)
            .field("options", &self.options)
            .finish()
    }
}

fn dtype(d: Dtype) -> Option<ScalarType> {
    Some(match d {
        Dtype::BOOL => ScalarType::Bool,
        Dtype::U8 => ScalarType::Byte,
        Dtype::I8 => ScalarType::Char,
        Dtype::I16 => ScalarType::Short,
        Dtype::U16 => ScalarType::UInt16,
        Dtype::I32 => ScalarType::Int,
        Dtype::U32 => ScalarType::UInt32,
        Dtype::I64 => ScalarType::Long,
        Dtype::U64 => ScalarType::UInt64,
        Dtype::F8_E4M3 => ScalarType::Float8E4M3FN,
        Dtype::F8_E5M2 => ScalarType::Float8E5M2,
        Dtype::F16 => ScalarType::Half,
        Dtype::BF16 => ScalarType::BFloat16,
        Dtype::F32 => ScalarType::Float,
        Dtype::F64 => ScalarType::Double,
        _ => return None,
    })
}

/// The `.safetensors` files of `path`: the file itself, or every such file in the folder
/// (sorted), for folders without an index.
fn files_of(path: &Path) -> Result<Vec<PathBuf>> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut v: Vec<PathBuf> = read_dir(path)?
        .into_iter()
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

fn read_dir(path: &Path) -> Result<Vec<PathBuf>> {
    let rd = std::fs::read_dir(path)
        .map_err(|e| Error::access_failed(format!("cannot read '{}': {e}", path.display())))?;
    Ok(rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
}

/// Reads the `*.safetensors.index.json` files of a folder (usually one,
/// `model.safetensors.index.json`); `None` when there is none.
fn read_index(dir: &Path) -> Result<Option<Index>> {
    let mut paths: Vec<PathBuf> = read_dir(dir)?
        .into_iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(".safetensors.index.json"))
        })
        .collect();
    if paths.is_empty() {
        return Ok(None);
    }
    paths.sort();
    let mut weight_map = HashMap::new();
    for p in &paths {
        let text = std::fs::read_to_string(p)
            .map_err(|e| Error::access_failed(format!("cannot read '{}': {e}", p.display())))?;
        let bad = |why: String| Error::invalid_argument(format!("'{}': {why}", p.display()));
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
        let map = json
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| bad("no \"weight_map\" object".into()))?;
        for (key, file) in map {
            let file = file
                .as_str()
                .filter(|f| {
                    Path::new(f)
                        .components()
                        .all(|c| matches!(c, Component::Normal(_)))
                })
                .ok_or_else(|| bad(format!("'{key}' maps to {file}, not a file in the folder")))?;
            weight_map.insert(key.clone(), file.to_string());
        }
    }
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    Ok(Some(Index {
        path: names.join(", "),
        weight_map,
        failed: HashMap::new(),
    }))
}

/// Maps a shard and checks that it parses.
fn map_shard(path: &Path) -> Result<Arc<DataSource>> {
    let src = Arc::new(DataSource::map_file(path)?);
    SafeTensors::deserialize(src.bytes()).map_err(|e| {
        Error::invalid_program(format!(
            "'{}' is not a valid safetensors file: {e}",
            path.display()
        ))
    })?;
    Ok(src)
}

impl Safetensors {
    /// An empty checkpoint, for tensors given with [`Safetensors::add`] (no index, no
    /// `config.json`).
    pub fn new(options: WeightOptions) -> Self {
        Safetensors {
            files: Vec::new(),
            entries: HashMap::new(),
            stacks: HashMap::new(),
            index: None,
            tied_embeddings: false,
            options,
            building: Mutex::new(()),
        }
    }

    /// Maps a `.safetensors` file or the shards of a folder, with the default options (no
    /// dtype conversion). See [`Safetensors::open_with`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, WeightOptions::default())
    }

    /// Maps a `.safetensors` file or the shards of a folder (a Hugging Face checkpoint).
    ///
    /// With a `model.safetensors.index.json` the shards are the files its `weight_map`
    /// names; a shard that is missing or unreadable is an error only when one of its
    /// tensors is requested, naming the tensor and the file. Without an index every
    /// `.safetensors` file of the folder is mapped and must be valid. `config.json` next to
    /// the weights, if any, says whether embeddings are tied.
    pub fn open_with(path: impl AsRef<Path>, options: WeightOptions) -> Result<Self> {
        let path = path.as_ref();
        let mut s = Safetensors::new(options);
        let dir = if path.is_dir() {
            path
        } else {
            path.parent().unwrap_or(Path::new("."))
        };
        match path
            .is_dir()
            .then(|| read_index(path))
            .transpose()?
            .flatten()
        {
            Some(index) => s.add_indexed(dir, index)?,
            None => {
                for f in files_of(path)? {
                    let src = Arc::new(DataSource::map_file(&f)?);
                    s.add(src, &f.display().to_string())?;
                }
            }
        }
        s.tied_embeddings = hf_names::tied_embeddings(dir)?;
        Ok(s)
    }

    /// Maps the shards an index names; failures are kept in the index.
    fn add_indexed(&mut self, dir: &Path, mut index: Index) -> Result<()> {
        let shards: BTreeSet<String> = index.weight_map.values().cloned().collect();
        for shard in shards {
            let path = dir.join(&shard);
            match map_shard(&path) {
                Ok(src) => self.add(src, &path.display().to_string())?,
                Err(e) => {
                    index.failed.insert(shard, e);
                }
            }
        }
        for key in index.weight_map.keys() {
            self.note_name(key);
        }
        self.index = Some(index);
        Ok(())
    }

    /// Adds the tensors of one file's bytes (`name` for messages).
    pub fn add(&mut self, src: Arc<DataSource>, name: &str) -> Result<()> {
        let bytes = src.bytes();
        let st = SafeTensors::deserialize(bytes).map_err(|e| {
            Error::invalid_program(format!("{name}: not a valid safetensors file: {e}"))
        })?;
        // The file is kept before its tensors are: entries added before an error stay valid.
        let fi = self.files.len();
        self.files.push(Arc::clone(&src));
        let base = bytes.as_ptr() as usize;
        for (key, view) in st.tensors() {
            let data = view.data();
            let start = data.as_ptr() as usize - base;
            let range = start..start + data.len();
            let layout = dtype(view.dtype())
                .map(|dt| TensorLayout {
                    dtype: dt,
                    sizes: view.shape().iter().map(|&v| v as i64).collect(),
                    dim_order: (0..view.shape().len() as u8).collect(),
                })
                .ok_or_else(|| format!("{:?}", view.dtype()));
            let aligned = layout.as_ref().map_or(true, |l| {
                (data.as_ptr() as usize).is_multiple_of(l.dtype.element_size())
            });
            let bytes = if aligned {
                Bytes::Mapped(fi, range)
            } else {
                Bytes::Copied(AlignedBuf::from_bytes(data)?)
            };
            let entry = Entry {
                bytes,
                layout,
                converted: Cache::default(),
            };
            if self.entries.insert(key.clone(), entry).is_some() {
                return Err(Error::invalid_program(format!(
                    "{name}: tensor '{key}' appears in more than one file"
                )));
            }
            self.note_name(&key);
        }
        Ok(())
    }

    /// Records a per-expert name under the stacked tensor it belongs to.
    fn note_name(&mut self, name: &str) {
        if let Some((fused, prefix, kind, e)) = hf_names::expert_part(name) {
            let s = self.stacks.entry(fused).or_insert_with(|| Stack {
                kind,
                prefix: prefix.to_string(),
                experts: 0,
                built: Cache::default(),
            });
            s.experts = s.experts.max(e.saturating_add(1));
        }
    }

    /// Number of tensors in the files.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no tensors.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
