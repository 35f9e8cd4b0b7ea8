//! `XnnpackBackend`: runs the XNNPACK delegates that ExecuTorch's `XnnpackPartitioner`
//! writes, with etch's own CPU kernels (no XNNPACK library).
//!
//! At init the payload ([`payload`]) is split into the graph flatbuffer and constant data,
//! the graph is decoded and validated ([`graph`]), constants are loaded from the payload or
//! the named data map, the internal values get an arena planned from their lifetimes
//! ([`memory`]), and every node is lowered to calls of etch's portable kernels over views
//! of the values ([`plan`]): XNNPACK's NHWC tensors become NCHW tensors in channels-last
//! dim order, constant filters are repacked for the kernels. A node etch cannot run fails
//! init with an error naming it. Executing binds the delegate's arguments (external ids:
//! inputs, then outputs) and runs the steps; it allocates nothing.

mod decode;
#[allow(
    missing_docs,
    clippy::all,
    clippy::pedantic,
    unused_imports,
    dead_code,
    non_camel_case_types
)]
mod generated;
pub mod graph;
mod lower;
mod memory;
pub use memory::{Layout, set_layout};
pub mod payload;
mod plan;
mod qd8;
mod qs8;
mod rows;

pub(crate) use generated::fb_xnnpack as fb;

use etch_core::{Error, KernelContext, Result};
use etch_format::NamedDataMap;
use etch_runtime::{Backend, BackendInitContext, CompileSpec, Delegate};
use graph::{ConstantSource, Graph};

/// The backend id ExecuTorch's exporter writes.
pub const XNNPACK_BACKEND_ID: &str = "XnnpackBackend";

/// The XNNPACK delegate backend. See the [module docs](self).
#[derive(Debug, Default, Clone, Copy)]
pub struct XnnpackBackend;

impl XnnpackBackend {
    /// The backend.
    pub fn new() -> Self {
        XnnpackBackend
    }
}

/// The bytes of constant table entry `c` (at most its size), checking their range.
fn entry_bytes<'a>(
    c: &graph::Constant,
    constant_data: &'a [u8],
    named: Option<&'a dyn NamedDataMap>,
) -> Result<&'a [u8]> {
    let bytes: &[u8] = match &c.source {
        ConstantSource::Offset(off) => {
            let r =
                etch_format::checked_range(*off, c.size, constant_data.len(), "XNNPACK constant")?;
            &constant_data[r]
        }
        ConstantSource::Named(key) => {
            let m = named.ok_or_else(|| {
                Error::not_found(format!("XNNPACK constant '{key}' needs named data"))
            })?;
            m.get(key)
                .ok_or_else(|| {
                    Error::not_found(format!(
                        "XNNPACK constant '{key}' is in neither the program nor the data files"
                    ))
                })?
                .data
        }
    };
    Ok(&bytes[..bytes
        .len()
        .min(usize::try_from(c.size).unwrap_or(usize::MAX))])
}

/// The constants' bytes: of each constant value (exactly its size), and of each quantized
/// value's scales when they are in constant data (the whole entry).
struct Constants<'a> {
    values: Vec<Option<&'a [u8]>>,
    scales: Vec<Option<&'a [u8]>>,
}

/// Finds the bytes of every constant value and of quantized values' scales.
fn load_constants<'a>(
    g: &Graph,
    constant_data: &'a [u8],
    named: Option<&'a dyn NamedDataMap>,
) -> Result<Constants<'a>> {
    let mut out = Constants {
        values: Vec::with_capacity(g.values.len()),
        scales: Vec::with_capacity(g.values.len()),
    };
    for (id, v) in g.values.iter().enumerate() {
        let scale = v.quant.as_ref().and_then(graph::Quant::scale_constant);
        out.scales.push(match scale {
            Some(i) => Some(entry_bytes(&g.constants[i as usize], constant_data, named)?),
            None => None,
        });
        if v.constant == 0 {
            out.values.push(None);
            continue;
        }
        let need = memory::value_bytes(g, id)?;
        let bytes = entry_bytes(&g.constants[v.constant as usize], constant_data, named)?;
        if bytes.len() < need {
            return Err(Error::invalid_program(format!(
                "XNNPACK constant {} of value {id} has {} bytes; its shape {:?} needs {need}",
                v.constant,
                bytes.len(),
                &v.dims[..]
            )));
        }
        out.values.push(Some(&bytes[..need]));
    }
    Ok(out)
}

/// Decodes a payload and builds its plan.
pub(crate) fn build_plan(
    processed: &[u8],
    named: Option<&dyn NamedDataMap>,
    limit: Option<u64>,
) -> Result<plan::Plan> {
    let p = payload::parse(processed)?;
    let mut g = Graph::decode(p.flatbuffer)?;
    lower::fuse_qs8_luts(&mut g);
    lower::fuse_qs8_clamps(&mut g);
    lower::dedupe_converts(&mut g);
    plan_graph(&g, p.constant_data, named, limit)
}

/// The plan of a decoded graph (its constants in `constant_data` or `named`).
pub(crate) fn plan_graph(
    g: &Graph,
    constant_data: &[u8],
    named: Option<&dyn NamedDataMap>,
    limit: Option<u64>,
) -> Result<plan::Plan> {
    let mem = memory::plan(g)?;
    let constants = load_constants(g, constant_data, named)?;
    let mut b = plan::Builder::new(g, mem, constants.values, constants.scales, limit)?;
    // A node may be lowered together with the next one (lower::node says how many it took).
    let mut i = 0;
    while i < g.nodes.len() {
        i += lower::node(&mut b, i, &g.nodes[i])?;
    }
    for &id in &g.output_ids {
        if g.values[id as usize].external_id.is_none() {
            return Err(Error::invalid_program(format!(
                "XNNPACK output value {id} has no external id"
            )));
        }
        // Outputs no node writes still get bound (and are left as they are).
        b.tensor(id)?;
    }
    b.finish()
}

/// The node types of an XNNPACK payload with their counts, in order of first appearance.
pub fn node_counts(processed: &[u8]) -> Result<Vec<(&'static str, usize)>> {
    let p = payload::parse(processed)?;
    let g = Graph::decode(p.flatbuffer)?;
    let mut counts: Vec<(&'static str, usize)> = Vec::new();
    for n in &g.nodes {
        match counts.iter_mut().find(|c| c.0 == n.name) {
            Some(c) => c.1 += 1,
            None => counts.push((n.name, 1)),
        }
    }
    Ok(counts)
}

impl Backend for XnnpackBackend {
    fn is_available(&self) -> bool {
        true
    }

    fn init(
        &self,
        ctx: &BackendInitContext<'_>,
        processed: &[u8],
        _compile_specs: &[CompileSpec],
    ) -> Result<Box<dyn Delegate>> {
        let plan = build_plan(processed, ctx.named_data, ctx.config.max_planned_bytes)?;
        Ok(Box::new(XnnpackDelegate { plan }))
    }
}

struct XnnpackDelegate {
    plan: plan::Plan,
}

impl Delegate for XnnpackDelegate {
    fn execute(&mut self, args: &mut KernelContext<'_>) -> Result<()> {
        self.plan.execute(args)
    }
}
