//! `etch lower`: moves what a device supports into delegates, inserts host<->device
//! copies and plans memory per device; or, with `--replan-only`, re-plans a CPU program.

use super::to_json_pretty;
use etch::compiler::{
    LowerOptions, MethodLowering, MethodPlanStats, MethodSelection, PlanOptions, SupportedOps,
};
use etch::{Device, Error, Result};
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `etch help lower`.
pub const LONG_ABOUT: &str = "\
Lower a program for a device.

Moves the operators the device supports into ExecutorBackend delegates (nested .pte programs
with the compile spec target_device), inserts et_copy host<->device copies at their
boundaries and plans memory per device. The output is a standard .pte. With --replan-only,
the program stays on the CPU and only its memory is re-planned.";

/// The options of `etch lower`.
#[derive(clap::Args, Debug)]
pub struct LowerArgs {
    /// The program to lower
    #[arg(value_name = "IN.pte")]
    pub input: PathBuf,
    /// Where to write the lowered program
    #[arg(short = 'o', long = "output", value_name = "OUT.pte")]
    pub output: PathBuf,
    /// Target device [default: cuda:0]
    #[arg(long, value_name = "DEV", value_parser = parse_device)]
    pub device: Option<Device>,
    /// What the device runs: `cuda` (etch's CUDA kernels, per operator and dtype; the
    /// default), `portable` (every portable kernel: what the simulated device runs) or a
    /// file with one operator name per line
    #[arg(long, value_name = "SET")]
    pub ops: Option<String>,
    /// One delegate per operator instead of maximal regions
    #[arg(long)]
    pub per_op: bool,
    /// Keep `aten::linear` calls as they are (by default those with constant weights
    /// become `etch::linear_group` calls, consecutive ones of one input merged: one GEMV
    /// launch per group when decoding on CUDA)
    #[arg(long)]
    pub no_linear_groups: bool,
    /// Inputs of these methods (all without a list) are taken on the device: no copy, and
    /// the inputs are left unplanned
    #[arg(long, value_name = "M,..", num_args = 0..=1, require_equals = true)]
    pub skip_h2d_inputs: Option<Option<String>>,
    /// Outputs of these methods (all without a list) stay on the device (unplanned)
    #[arg(long, value_name = "M,..", num_args = 0..=1, require_equals = true)]
    pub skip_d2h_outputs: Option<Option<String>>,
    /// Keep the program on the CPU; only re-plan its memory (never more bytes than before)
    #[arg(
        long,
        conflicts_with_all = ["device", "ops", "skip_h2d_inputs", "skip_d2h_outputs", "per_op", "no_linear_groups"]
    )]
    pub replan_only: bool,
    /// With --replan-only: leave the method inputs unplanned (the caller binds them), as
    /// upstream's alloc_graph_input=False (when lowering, the skip flags imply it)
    #[arg(long, requires = "replan_only")]
    pub no_alloc_graph_input: bool,
    /// With --replan-only: leave the method outputs unplanned, as upstream's
    /// alloc_graph_output=False
    #[arg(long, requires = "replan_only")]
    pub no_alloc_graph_output: bool,
    /// Planning alignment in bytes, a power of two [default: 16, as upstream]
    #[arg(long, value_name = "N", value_parser = power_of_two)]
    pub alignment: Option<usize>,
    /// Print the summary as JSON
    #[arg(long)]
    pub json: bool,
}

fn parse_device(s: &str) -> std::result::Result<Device, String> {
    s.parse::<Device>().map_err(|e| e.message().to_string())
}

fn power_of_two(s: &str) -> std::result::Result<usize, String> {
    s.parse::<usize>()
        .ok()
        .filter(|a| a.is_power_of_two())
        .ok_or_else(|| format!("expected a power of two, got '{s}'"))
}

/// A method list (`M1,M2`), or all methods when absent.
fn parse_methods(v: Option<&str>) -> MethodSelection {
    match v {
        None => MethodSelection::All,
        Some(list) => MethodSelection::Some(
            list.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
        ),
    }
}

/// A skip flag: absent → no method; bare → all; `=M1,M2` → those.
fn skip(flag: &Option<Option<String>>) -> MethodSelection {
    match flag {
        None => MethodSelection::None,
        Some(list) => parse_methods(list.as_deref()),
    }
}

fn supported_ops(set: &str) -> Result<(String, SupportedOps)> {
    Ok(match set {
        "portable" | "simulated" => {
            let k = etch::default_kernels();
            (
                format!("portable ({} operators)", k.len()),
                SupportedOps::new(k.names()),
            )
        }
        "cuda" => {
            let ops = SupportedOps::with_op_dtypes(etch::cuda_op_support());
            (
                format!("cuda ({} operators, each with its dtypes)", ops.len()),
                ops,
            )
        }
        file => {
            let text = std::fs::read_to_string(file).map_err(|e| {
                Error::invalid_argument(format!(
                    "--ops {file}: not `cuda` or `portable`, and not a readable file: {e}"
                ))
            })?;
            let names: Vec<String> = text
                .lines()
                .map(|l| l.trim().to_string())
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .collect();
            (
                format!("{file} ({} operators)", names.len()),
                SupportedOps::new(names),
            )
        }
    })
}

fn device_bytes(m: &BTreeMap<Device, u64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(d, b)| format!("{d} {b}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn plan_json(p: &MethodPlanStats) -> Json {
    let by = |m: &BTreeMap<Device, u64>| {
        Json::Object(m.iter().map(|(d, b)| (d.to_string(), json!(b))).collect())
    };
    json!({
        "method": p.method,
        "before": by(&p.before),
        "after": by(&p.after),
        "total_before": p.total_before(),
        "total_after": p.total_after(),
        "kept_original": p.kept_original,
        "lower_bound": p.lower_bound,
    })
}

/// `--replan-only`: re-plans every method; adds the text and JSON reports.
fn replan(
    a: &LowerArgs,
    parts: &mut etch::ProgramParts,
    alignment: usize,
    text: &mut String,
    report: &mut Json,
) -> Result<()> {
    let stats = etch::compiler::replan(
        parts,
        &PlanOptions {
            alignment,
            alloc_graph_input: a.no_alloc_graph_input.then_some(false),
            alloc_graph_output: a.no_alloc_graph_output.then_some(false),
        },
    )?;
    text.push_str(&format!(
        "re-planned {} -> {}\n",
        a.input.display(),
        a.output.display()
    ));
    for s in &stats {
        let ratio = s.total_after() as f64 / s.total_before().max(1) as f64;
        text.push_str(&format!(
            "method {}: planned bytes {} -> {} ({:.3}x){}\n",
            s.method,
            s.total_before(),
            s.total_after(),
            ratio,
            if s.kept_original {
                " (kept the original plan: ours was not smaller)"
            } else {
                ""
            }
        ));
    }
    report["methods"] = Json::Array(stats.iter().map(plan_json).collect());
    Ok(())
}

/// The text report of one lowered method.
fn lowered_text(m: &MethodLowering, device: Device) -> String {
    let mut t = format!(
        "method {}: {} delegate(s) holding {} instruction(s); {} kernel call(s) stay on the host\n",
        m.method, m.delegates, m.delegated_instructions, m.host_instructions
    );
    t.push_str(&format!(
        "  copies inserted: {} h2d, {} d2h; elided: {} upload(s) reused, {} d2h->h2d round trip(s), {} d2h not needed\n",
        m.h2d_copies, m.d2h_copies, m.uploads_reused, m.round_trips_elided, m.downloads_skipped
    ));
    if m.linears_grouped > 0 {
        t.push_str(&format!(
            "  linears: {} aten::linear call(s) with constant weights became {} etch::linear_group call(s) (sibling linears of one input merged)\n",
            m.linears_grouped, m.linear_groups
        ));
    }
    if m.device_positions > 0 {
        t.push_str(&format!(
            "  positions read on the device: {} reader(s) of _local_scalar_dense take the int64 element instead\n",
            m.device_positions
        ));
    }
    if m.device_state + m.host_state > 0 {
        t.push_str(&format!(
            "  state: {} buffer(s) on {device} (updated in place by the delegates), {} on the host\n",
            m.device_state, m.host_state
        ));
    }
    if m.device_inputs + m.device_outputs > 0 {
        t.push_str(&format!(
            "  on the device: {} input(s), {} output(s) (unplanned; bind device memory)\n",
            m.device_inputs, m.device_outputs
        ));
    }
    t.push_str(&format!(
        "  planned bytes: before {}; after {} (+ {} in the delegates, on {device})\n",
        device_bytes(&m.plan.before),
        device_bytes(&m.plan.after),
        m.delegate_planned_bytes
    ));
    t
}

fn lowered_json(m: &MethodLowering) -> Json {
    json!({
        "method": m.method,
        "delegates": m.delegates,
        "delegated_instructions": m.delegated_instructions,
        "host_instructions": m.host_instructions,
        "matmuls_rewritten": m.matmuls_rewritten,
        "linears_grouped": m.linears_grouped,
        "linear_groups": m.linear_groups,
        "device_positions": m.device_positions,
        "h2d_copies": m.h2d_copies,
        "d2h_copies": m.d2h_copies,
        "uploads_reused": m.uploads_reused,
        "round_trips_elided": m.round_trips_elided,
        "downloads_skipped": m.downloads_skipped,
        "device_inputs": m.device_inputs,
        "device_outputs": m.device_outputs,
        "plan": plan_json(&m.plan),
        "delegate_planned_bytes": m.delegate_planned_bytes,
        "device_state": m.device_state,
        "host_state": m.host_state,
    })
}

/// Lowering proper: adds the text and JSON reports.
fn lower(
    a: &LowerArgs,
    parts: &mut etch::ProgramParts,
    alignment: usize,
    text: &mut String,
    report: &mut Json,
) -> Result<()> {
    let device = a.device.unwrap_or(Device::cuda(0));
    let (ops_desc, supported) = supported_ops(a.ops.as_deref().unwrap_or("cuda"))?;
    let mut opts = LowerOptions::new(device, supported);
    opts.skip_h2d_inputs = skip(&a.skip_h2d_inputs);
    opts.skip_d2h_outputs = skip(&a.skip_d2h_outputs);
    opts.alignment = alignment;
    opts.per_op = a.per_op;
    opts.group_linears = !a.no_linear_groups;
    let summary = etch::compiler::lower(parts, &opts)?;
    text.push_str(&format!(
        "lowered {} -> {} for {device} (ops: {ops_desc})\n",
        a.input.display(),
        a.output.display()
    ));
    for m in &summary.methods {
        text.push_str(&lowered_text(m, device));
    }
    report["device"] = json!(device.to_string());
    report["ops"] = json!(ops_desc);
    report["methods"] = Json::Array(summary.methods.iter().map(lowered_json).collect());
    Ok(())
}

/// Checks that the bytes load and writes them.
fn write_checked(bytes: &[u8], output: &Path) -> Result<()> {
    let check = etch::Program::from_bytes(bytes)
        .map_err(|e| Error::internal(format!("the lowered program does not load: {e}")))?;
    for name in check.method_names() {
        etch::MethodMeta::new(&check, name)
            .map_err(|e| Error::internal(format!("lowered method '{name}' is invalid: {e}")))?;
    }
    std::fs::write(output, bytes)
        .map_err(|e| Error::access_failed(format!("cannot write {}: {e}", output.display())))
}

/// `etch lower IN.pte -o OUT.pte [...]`.
pub fn cmd_lower(a: &LowerArgs) -> Result<()> {
    let alignment = a.alignment.unwrap_or(etch::compiler::DEFAULT_ALIGNMENT);
    let program = etch::Program::from_file(&a.input)?;
    let mut parts = etch::ProgramParts::from_program(&program)?;
    let mut report = json!({
        "input": a.input.display().to_string(),
        "output": a.output.display().to_string(),
    });
    let mut text = String::new();
    if a.replan_only {
        replan(a, &mut parts, alignment, &mut text, &mut report)?;
    } else {
        lower(a, &mut parts, alignment, &mut text, &mut report)?;
    }
    // What we write must load.
    write_checked(&parts.to_bytes(etch::WriteOptions::default())?, &a.output)?;
    if a.json {
        println!("{}", to_json_pretty(&report)?);
    } else {
        print!("{text}");
    }
    Ok(())
}
