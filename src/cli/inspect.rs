//! `etch inspect`: a program's methods, their inputs and outputs, operators, delegates and
//! planned memory, as text or JSON.

use super::{shape_str, to_json_pretty};
use etch::{Module, Result};
use serde_json::{Value as Json, json};
use std::path::PathBuf;

/// Print a program's methods, inputs, outputs, operators, delegates and planned buffers.
#[derive(clap::Args, Debug)]
pub struct InspectArgs {
    /// The program (.pte)
    #[arg(value_name = "MODEL.pte")]
    pub model: PathBuf,
    /// Print the report as JSON
    #[arg(long)]
    pub json: bool,
}

/// A compile spec value: text when it is printable, hex otherwise.
fn spec_value(v: &[u8]) -> String {
    match std::str::from_utf8(v) {
        Ok(s) if s.chars().all(|c| !c.is_control()) => s.to_string(),
        _ => format!(
            "0x{}",
            v.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ),
    }
}

fn io_json(infos: &[etch::IoInfo]) -> Vec<Json> {
    infos
        .iter()
        .map(|i| match &i.tensor {
            Some(t) => json!({
                "tag": i.tag.name(),
                "dtype": t.dtype.name(),
                "sizes": t.sizes,
                "dim_order": t.dim_order,
                "dynamism": t.dynamism.name(),
                "memory_planned": t.is_memory_planned,
                "device": t.device.to_string(),
            }),
            None => json!({ "tag": i.tag.name() }),
        })
        .collect()
}

/// An XNNPACK delegate's node types with their counts (or the error reading them).
fn xnnpack_nodes(module: &Module, method: &str, index: usize) -> Json {
    let counts = module
        .program()
        .delegate_blob(method, index)
        .and_then(etch::xnnpack::node_counts);
    match counts {
        Ok(c) => Json::Object(
            c.into_iter()
                .map(|(n, k)| (n.to_string(), json!(k)))
                .collect(),
        ),
        Err(e) => json!({ "error": e.to_string() }),
    }
}

/// The JSON report of one method.
fn method_json(module: &Module, name: &str) -> Result<Json> {
    let meta = module.method_meta(name)?;
    let mut buffers = Vec::new();
    for i in 0..meta.num_memory_planned_buffers() {
        buffers.push(json!({
            "index": i,
            "size": meta.memory_planned_buffer_size(i)?,
            "device": meta.memory_planned_buffer_device(i)?.to_string(),
        }));
    }
    let delegates: Vec<Json> = meta
        .delegates()
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let specs: serde_json::Map<String, Json> = d
                .compile_specs
                .iter()
                .map(|c| (c.key.clone(), Json::String(spec_value(&c.value))))
                .collect();
            let mut j =
                json!({"backend": d.backend, "compile_specs": specs, "blob_size": d.blob_size});
            if d.backend == etch::xnnpack::XNNPACK_BACKEND_ID {
                j["xnnpack_nodes"] = xnnpack_nodes(module, name, i);
            }
            j
        })
        .collect();
    let counts: serde_json::Map<String, Json> = meta
        .operators()
        .iter()
        .zip(meta.operator_counts())
        .map(|(o, c)| (o.clone(), json!(c)))
        .collect();
    let tensor_devices: serde_json::Map<String, Json> = meta
        .tensor_devices()
        .iter()
        .map(|(d, n)| (d.to_string(), json!(n)))
        .collect();
    let named = |v: &[etch::NamedTensor]| -> Vec<Json> {
        v.iter()
            .map(|t| {
                json!({"name": t.name, "dtype": t.dtype.to_string(), "sizes": t.sizes,
                       "nbytes": t.nbytes, "device": t.device.to_string()})
            })
            .collect()
    };
    Ok(json!({
        "name": name,
        "tensor_devices": tensor_devices,
        "external_constants": named(meta.external_constants()),
        "state": named(meta.named_state()),
        "inputs": io_json(meta.inputs()),
        "outputs": io_json(meta.outputs()),
        "operators": meta.operators(),
        "operator_counts": counts,
        "num_instructions": meta.num_instructions(),
        "delegates": delegates,
        "planned_buffers": buffers,
    }))
}

/// One input or output line of the text report.
fn io_line(kind: &str, i: usize, v: &Json) -> String {
    if v["tag"] != "Tensor" {
        return format!("  {kind} {i}: {}", v["tag"].as_str().unwrap_or(""));
    }
    let sizes: Vec<usize> = v["sizes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_u64().map(|x| x as usize))
        .collect();
    format!(
        "  {kind} {i}: Tensor {} {} {}{}{}",
        v["dtype"].as_str().unwrap_or(""),
        shape_str(&sizes),
        v["dynamism"].as_str().unwrap_or(""),
        if v["memory_planned"] == true {
            ", planned"
        } else {
            ""
        },
        if v["device"] != "cpu" {
            format!(", on {}", v["device"].as_str().unwrap_or(""))
        } else {
            String::new()
        }
    )
}

/// One line for a list of named tensors: count, bytes per device, the first names.
fn print_named(what: &str, list: &Json) {
    let Some(v) = list.as_array().filter(|v| !v.is_empty()) else {
        return;
    };
    let mut per_dev: std::collections::BTreeMap<&str, u64> = Default::default();
    for t in v {
        *per_dev
            .entry(t["device"].as_str().unwrap_or(""))
            .or_default() += t["nbytes"].as_u64().unwrap_or(0);
    }
    let bytes: Vec<String> = per_dev
        .iter()
        .map(|(d, b)| format!("{b} bytes on {d}"))
        .collect();
    let names: Vec<&str> = v
        .iter()
        .take(3)
        .filter_map(|t| t["name"].as_str())
        .collect();
    println!(
        "  {what}: {} tensors, {} ({}{})",
        v.len(),
        bytes.join(", "),
        names.join(", "),
        if v.len() > 3 { ", ..." } else { "" }
    );
}

/// The text report of one method (from its JSON report).
fn print_method(m: &Json) {
    println!("\nmethod {}", m["name"].as_str().unwrap_or(""));
    for (kind, key) in [("input", "inputs"), ("output", "outputs")] {
        for (i, v) in m[key].as_array().into_iter().flatten().enumerate() {
            println!("{}", io_line(kind, i, v));
        }
    }
    println!("  operators ({} instructions):", m["num_instructions"]);
    if let Some(c) = m["operator_counts"].as_object() {
        for (op, n) in c {
            println!("    {n:>4} × {op}");
        }
    }
    for (i, d) in m["delegates"].as_array().into_iter().flatten().enumerate() {
        println!(
            "  delegate {i}: {} ({} bytes) specs {}",
            d["backend"].as_str().unwrap_or(""),
            d["blob_size"],
            d["compile_specs"]
        );
        if let Some(nodes) = d["xnnpack_nodes"].as_object() {
            let parts: Vec<String> = nodes.iter().map(|(n, k)| format!("{k} × {n}")).collect();
            println!("    XNNPACK nodes: {}", parts.join(", "));
        }
    }
    if let Some(td) = m["tensor_devices"].as_object() {
        let parts: Vec<String> = td.iter().map(|(d, n)| format!("{n} on {d}")).collect();
        println!("  tensors: {}", parts.join(", "));
    }
    for (key, what) in [
        ("external_constants", "external constants"),
        ("state", "state"),
    ] {
        print_named(what, &m[key]);
    }
    for b in m["planned_buffers"].as_array().into_iter().flatten() {
        println!(
            "  planned buffer {}: {} bytes on {}",
            b["index"],
            b["size"],
            b["device"].as_str().unwrap_or("")
        );
    }
}

/// `etch inspect MODEL.pte [--json]`.
pub fn cmd_inspect(args: &InspectArgs) -> Result<()> {
    let path = args.model.display().to_string();
    let module = Module::from_file(&args.model)?;
    let program = module.program();
    let methods = module
        .method_names()
        .iter()
        .map(|n| method_json(&module, n))
        .collect::<Result<Vec<_>>>()?;
    let report = json!({
        "file": path,
        "file_size": program.bytes().len(),
        "segments": program.num_segments(),
        "constant_bytes": program.constant_bytes()?,
        "named_data": program.named_data_keys()?,
        "methods": methods,
    });
    if args.json {
        println!("{}", to_json_pretty(&report)?);
        return Ok(());
    }
    println!(
        "{path}: {} bytes, {} segment(s), {} constant bytes",
        program.bytes().len(),
        program.num_segments(),
        report["constant_bytes"]
    );
    for m in &methods {
        print_method(m);
    }
    Ok(())
}
