//! Finding a program's tensor in a checkpoint: name mapping, checks against the layout the
//! program declares, and the tensors built on first request (stacked experts, converted
//! dtypes).

use super::convert::is_convertible;
use super::hf_names::{self, StackKind};
use super::pieces::TensorPieces;
use super::{Built, Bytes, Cache, Entry, Safetensors, Stack};
use crate::{DataSource, NamedBlob, NamedDataMap, TensorLayout, TensorSource};
use etch_core::{ByteSource, Error, Result, ScalarType};
use std::fmt::Display;
use std::sync::PoisonError;

/// A program name and the checkpoint name it was found under, for messages.
struct Named<'a> {
    key: &'a str,
    name: &'a str,
}

impl Display for Named<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.key == self.name {
            write!(f, "tensor '{}'", self.key)
        } else {
            write!(f, "tensor '{}' (checkpoint '{}')", self.key, self.name)
        }
    }
}

/// Where a program's tensor is in the checkpoint, and the name it was found under.
enum Found<'a> {
    Entry(String, &'a Entry),
    Stack(String, &'a Stack),
}

/// One per-expert tensor of a stack.
struct Part<'a> {
    name: String,
    entry: &'a Entry,
    layout: &'a TensorLayout,
}

impl Built {
    fn blob(&self) -> NamedBlob<'_> {
        NamedBlob {
            data: self.buf.as_slice(),
            layout: Some(&self.layout),
        }
    }
}

fn numel(sizes: &[i64]) -> usize {
    sizes.iter().map(|&s| s.max(0) as usize).product()
}

fn shape_error(what: impl Display, found: &[i64], expected: &[i64]) -> Error {
    Error::invalid_program(format!(
        "{what} has shape {found:?}; the program expects {expected:?}"
    ))
}

impl Safetensors {
    /// The checkpoint tensor `name` itself (no name mapping); an error when the index puts
    /// it in a shard that could not be read or that does not hold it.
    fn raw(&self, name: &str) -> Result<Option<&Entry>> {
        if let Some(e) = self.entries.get(name) {
            return Ok(Some(e));
        }
        let Some(index) = &self.index else {
            return Ok(None);
        };
        let Some(shard) = index.weight_map.get(name) else {
            return Ok(None);
        };
        Err(match index.failed.get(shard) {
            Some(e) => Error::new(
                e.code(),
                format!(
                    "tensor '{name}' is in shard '{shard}' ({}), which cannot be read: {}",
                    index.path,
                    e.message()
                ),
            ),
            None => Error::invalid_program(format!(
                "tensor '{name}' is in shard '{shard}' according to {}, but that shard does not hold it",
                index.path
            )),
        })
    }

    /// Where the tensor the program calls `key` is: a stored tensor or a stack of
    /// per-expert tensors, under the first name `hf_names` derives that the checkpoint has.
    fn find(&self, key: &str) -> Result<Found<'_>> {
        let names = hf_names::candidates(key, self.tied_embeddings);
        for name in &names {
            if let Some(e) = self.raw(name)? {
                return Ok(Found::Entry(name.clone(), e));
            }
            if let Some(s) = self.stacks.get(name) {
                return Ok(Found::Stack(name.clone(), s));
            }
        }
        let mut tried: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
        for name in &names {
            if let Some((prefix, kind)) = hf_names::stacked_name(name) {
                let parts = kind.parts(prefix, "E");
                tried.push(format!("per expert '{}'", parts.join("' + '")));
            }
        }
        Err(Error::not_found(format!(
            "tensor '{key}' is not in the checkpoint (tried {})",
            tried.join(", ")
        )))
    }

    /// The tensor the program calls `key`, with the layout `expected` when given (without:
    /// as stored, experts stacked in their own dtype). Stacked and converted tensors are
    /// built in host memory once and kept (host kernels read them for the checkpoint's
    /// life).
    pub(super) fn lookup(
        &self,
        key: &str,
        expected: Option<&TensorLayout>,
    ) -> Result<NamedBlob<'_>> {
        match self.find(key)? {
            Found::Entry(name, e) => self.entry_blob(&Named { key, name: &name }, e, expected),
            Found::Stack(name, s) => {
                let named = Named { key, name: &name };
                let b = self.cached(&s.built, expected.map(|x| x.dtype), || {
                    let (pieces, layout) = self.stack_pieces(&named, s, expected)?;
                    Ok(Built {
                        layout,
                        buf: pieces.build()?,
                    })
                })?;
                // Built for an earlier request: the same dtype, but check the shape.
                if let Some(x) = expected
                    && (b.layout.sizes != x.sizes || b.layout.dtype != x.dtype)
                {
                    return Err(Error::invalid_program(format!(
                        "{named} was stacked as {} {:?}; the program expects {} {:?}",
                        b.layout.dtype, b.layout.sizes, x.dtype, x.sizes
                    )));
                }
                Ok(b.blob())
            }
        }
    }

    /// The tensor the program calls `key` with layout `expected`, as pieces of the files
    /// produced on demand (for a copy to a device): the same checks and bytes as
    /// [`Safetensors::lookup`], but nothing is built or kept in host memory.
    pub(super) fn lookup_pieces(
        &self,
        key: &str,
        expected: &TensorLayout,
    ) -> Result<(TensorPieces<'_>, TensorLayout)> {
        match self.find(key)? {
            Found::Entry(name, e) => {
                let named = Named { key, name: &name };
                let layout = self.check_entry(&named, e, expected)?;
                let mut pieces = TensorPieces::new(named.to_string(), layout.dtype, expected.dtype);
                let (bytes, file) = self.entry_part(e);
                pieces.push(bytes, file)?;
                let layout = TensorLayout {
                    dtype: expected.dtype,
                    ..layout.clone()
                };
                check_len(&named, &pieces, &layout)?;
                Ok((pieces, layout))
            }
            Found::Stack(name, s) => {
                self.stack_pieces(&Named { key, name: &name }, s, Some(expected))
            }
        }
    }

    /// `Err` unless `from` may be used for a tensor the program declares as `to`.
    fn check_dtype(&self, what: &dyn Display, from: ScalarType, to: ScalarType) -> Result<()> {
        if from == to {
            return Ok(());
        }
        if !self.options.convert_dtype {
            return Err(Error::invalid_program(format!(
                "{what} is {from}; the program expects {to} (pass --convert-dtype, or \
                 WeightOptions {{ convert_dtype: true }}, to convert float32/bfloat16/float16 \
                 weights on load)"
            )));
        }
        if !is_convertible(from) || !is_convertible(to) {
            return Err(Error::not_supported(format!(
                "{what} is {from}; the program expects {to}: conversion is between float32, \
                 bfloat16 and float16 only"
            )));
        }
        Ok(())
    }

    /// The tensor in `cache` for `dtype` (`None`: the source's own dtype, which has a slot
    /// of its own), built once: concurrent first requests wait for one build.
    fn cached<'a>(
        &'a self,
        cache: &'a Cache,
        dtype: Option<ScalarType>,
        build: impl FnOnce() -> Result<Built>,
    ) -> Result<&'a Built> {
        let slot = cache.slot(dtype);
        if let Some(b) = slot.get() {
            return Ok(b);
        }
        let _guard = self.building.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(b) = slot.get() {
            return Ok(b);
        }
        let built = build()?;
        Ok(slot.get_or_init(|| built))
    }

    fn entry_bytes<'a>(&'a self, e: &'a Entry) -> &'a [u8] {
        self.entry_part(e).0
    }

    /// A stored tensor's bytes and, when they are a view of a mapped file, the file.
    fn entry_part<'a>(&'a self, e: &'a Entry) -> (&'a [u8], Option<&'a DataSource>) {
        match &e.bytes {
            Bytes::Mapped(f, r) => {
                let file = &self.files[*f];
                (&file.bytes()[r.clone()], Some(&**file))
            }
            Bytes::Copied(b) => (b.as_slice(), None),
        }
    }

    /// Checks a stored tensor against the layout the program declares (shape, dim order,
    /// dtype or an allowed conversion); returns its stored layout.
    fn check_entry<'a>(
        &self,
        named: &Named<'_>,
        e: &'a Entry,
        x: &TensorLayout,
    ) -> Result<&'a TensorLayout> {
        let layout = entry_layout(named, e)?;
        if layout.sizes != x.sizes {
            return Err(shape_error(named, &layout.sizes, &x.sizes));
        }
        if x.dim_order
            .iter()
            .enumerate()
            .any(|(i, &d)| d as usize != i)
        {
            return Err(Error::not_supported(format!(
                "{named}: the program expects dim order {:?}; checkpoint tensors are contiguous",
                x.dim_order
            )));
        }
        self.check_dtype(named, layout.dtype, x.dtype)?;
        Ok(layout)
    }

    /// A stored tensor for the program: a view, or a converted copy.
    fn entry_blob<'a>(
        &'a self,
        named: &Named<'_>,
        e: &'a Entry,
        expected: Option<&TensorLayout>,
    ) -> Result<NamedBlob<'a>> {
        let Some(x) = expected else {
            return Ok(NamedBlob {
                data: self.entry_bytes(e),
                layout: Some(entry_layout(named, e)?),
            });
        };
        let layout = self.check_entry(named, e, x)?;
        if layout.dtype == x.dtype {
            return Ok(NamedBlob {
                data: self.entry_bytes(e),
                layout: Some(layout),
            });
        }
        let b = self.cached(&e.converted, Some(x.dtype), || {
            let mut pieces = TensorPieces::new(named.to_string(), layout.dtype, x.dtype);
            let (bytes, file) = self.entry_part(e);
            pieces.push(bytes, file)?;
            let layout = TensorLayout {
                dtype: x.dtype,
                ..layout.clone()
            };
            check_len(named, &pieces, &layout)?;
            Ok(Built {
                layout,
                buf: pieces.build()?,
            })
        })?;
        Ok(b.blob())
    }

    /// The per-expert tensors of a stack, expert by expert.
    fn stack_parts(&self, named: &Named<'_>, s: &Stack) -> Result<Vec<Part<'_>>> {
        let mut parts = Vec::new();
        for e in 0..s.experts {
            for name in s.kind.parts(&s.prefix, e) {
                let entry = self.raw(&name)?.ok_or_else(|| {
                    Error::not_found(format!(
                        "{named} is not in the checkpoint, and it cannot be stacked from \
                         per-expert tensors: '{name}' is missing"
                    ))
                })?;
                let layout = entry_layout(&format!("expert tensor '{name}'"), entry)?;
                parts.push(Part {
                    name,
                    entry,
                    layout,
                });
            }
        }
        Ok(parts)
    }

    /// Stacks per-expert tensors into the layout the program expects (or, without one,
    /// the stored dtype and shapes), converting the dtype if needed and allowed: the
    /// pieces (each expert's parts in order) and the stacked layout.
    fn stack_pieces<'a>(
        &'a self,
        named: &Named<'_>,
        s: &Stack,
        expected: Option<&TensorLayout>,
    ) -> Result<(TensorPieces<'a>, TensorLayout)> {
        let want = expected.map(|x| expected_part(named, s, x)).transpose()?;
        let parts = self.stack_parts(named, s)?;
        let first = parts
            .first()
            .ok_or_else(|| Error::not_found(format!("{named}: no expert tensors")))?
            .layout;
        let part_sizes = want.unwrap_or_else(|| first.sizes.clone());
        let dtype = expected.map_or(first.dtype, |x| x.dtype);
        for p in &parts {
            let what = format!("expert tensor '{}' (stacked into {named})", p.name);
            if p.layout.sizes != part_sizes {
                return Err(shape_error(what, &p.layout.sizes, &part_sizes));
            }
            if p.layout.dtype != first.dtype {
                return Err(Error::invalid_program(format!(
                    "{what} is {}; the first expert's is {}",
                    p.layout.dtype, first.dtype
                )));
            }
        }
        if part_sizes.len() != 2 {
            return Err(Error::invalid_program(format!(
                "{named}: expert tensors have shape {part_sizes:?}; stacking needs matrices"
            )));
        }
        self.check_dtype(
            &format!("{named}, stacked from per-expert tensors,"),
            first.dtype,
            dtype,
        )?;
        let mut pieces = TensorPieces::new(named.to_string(), first.dtype, dtype);
        for p in &parts {
            let (bytes, file) = self.entry_part(p.entry);
            pieces.push(bytes, file)?;
        }
        let per_expert = parts.len() / s.experts;
        let sizes = vec![
            s.experts as i64,
            part_sizes[0] * per_expert as i64,
            part_sizes[1],
        ];
        let layout = TensorLayout {
            dtype,
            sizes,
            dim_order: vec![0, 1, 2],
        };
        check_len(named, &pieces, &layout)?;
        Ok((pieces, layout))
    }
}

/// `InvalidProgram` unless the pieces hold exactly the bytes of `layout`.
fn check_len(named: &Named<'_>, pieces: &TensorPieces<'_>, layout: &TensorLayout) -> Result<()> {
    let want = numel(&layout.sizes) * layout.dtype.element_size();
    if pieces.len() != want {
        return Err(Error::invalid_program(format!(
            "{named}: the checkpoint holds {} bytes for {} {:?} ({want} bytes)",
            pieces.len(),
            layout.dtype,
            layout.sizes
        )));
    }
    Ok(())
}

/// The layout of an entry, or `NotSupported` for a dtype etch does not load.
fn entry_layout<'a>(what: &dyn Display, e: &'a Entry) -> Result<&'a TensorLayout> {
    e.layout.as_ref().map_err(|d| {
        Error::not_supported(format!("{what} has dtype {d}, which etch does not load"))
    })
}

/// The shape of one per-expert tensor when the program expects the stack `x`.
fn expected_part(named: &Named<'_>, s: &Stack, x: &TensorLayout) -> Result<Vec<i64>> {
    let &[e, rows, cols] = x.sizes.as_slice() else {
        return Err(Error::invalid_program(format!(
            "{named}: the program expects shape {:?}; stacked experts are 3-D",
            x.sizes
        )));
    };
    if e != s.experts as i64 {
        return Err(Error::invalid_program(format!(
            "{named}: the checkpoint has {} experts under '{}'; the program expects {e} ({:?})",
            s.experts, s.prefix, x.sizes
        )));
    }
    Ok(match s.kind {
        StackKind::GateUp if rows % 2 != 0 => {
            return Err(Error::invalid_program(format!(
                "{named}: the program expects {:?}, whose gate/up dimension is odd",
                x.sizes
            )));
        }
        StackKind::GateUp => vec![rows / 2, cols],
        StackKind::Down => vec![rows, cols],
    })
}

impl NamedDataMap for Safetensors {
    fn get(&self, key: &str) -> Option<NamedBlob<'_>> {
        self.lookup(key, None).ok()
    }
    fn keys(&self) -> Vec<&str> {
        let mut k: Vec<&str> = self
            .entries
            .keys()
            .chain(self.stacks.keys())
            .map(|s| s.as_str())
            .collect();
        k.sort_unstable();
        k.dedup();
        k
    }
    fn get_tensor(&self, key: &str, expected: &TensorLayout) -> Result<Option<NamedBlob<'_>>> {
        self.lookup(key, Some(expected)).map(Some)
    }
    /// Stacked and converted tensors as pieces produced on demand, so a device copy never
    /// builds them in host memory; stored tensors are read from their files (`pread`).
    fn get_tensor_source(
        &self,
        key: &str,
        expected: &TensorLayout,
    ) -> Result<Option<TensorSource<'_>>> {
        let (pieces, layout) = self.lookup_pieces(key, expected)?;
        Ok(Some(TensorSource {
            bytes: Box::new(pieces),
            layout: Some(layout),
        }))
    }
}
