//! `etch generate`: token generation with an LLM program, streamed as text (with a
//! tokenizer) or ids, with seeded sampling and timing and memory figures.

mod program;
mod text;
mod tiktoken;

use super::progress::Progress;
use super::{
    ModelOpts, Opened, decimal_bytes, device_constant_bytes, device_transfers, mib,
    peak_device_bytes, proc_status_bytes,
};
use etch::{Error, Result, SplitMix64};
use program::{Convention, LlmProgram, Sampling};
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;
use text::{Checkpoint, Text, TextStream};

/// `etch help generate`: the conventions, the stops and what goes where.
pub const LONG_ABOUT: &str = "\
Generate text with an LLM program.

Program conventions, found from method names and input counts:
  prefill(tokens i64[1,T], input_pos i64[1], sampling f32[4]) and
  decode(tokens i64[1,1], input_pos i64[1], sampling f32[4]), sharing their KV cache
      (etch's convention; chosen when both methods exist);
  forward(tokens i64[1,T], input_pos i64[1]) with the KV cache inside
      (ExecuTorch's LLM runner, export_llm).
sampling = [temperature, top_k, top_p, u], with u a uniform draw from the --seed stream, one
per generated token. A method returning an int64 tensor returns the sampled token; one
returning floats returns logits ([1,V] or [1,T,V]), which etch samples the same way.
Metadata methods are read when present: get_max_seq_len, get_max_context_len,
get_vocab_size, get_bos_id, get_eos_ids (or get_eos_id), use_kv_cache,
enable_dynamic_shape, get_n_layers. A dynamic prompt length is prefilled in one call (in
chunks of the bound when longer), a static one in chunks of its length.

Generation stops at an end-of-sequence id (the program's get_eos_ids, else eos_token_id of
generation_config.json or config.json beside the tokenizer or the weights), after
--max-new-tokens, or at the program's context length. Text streams to stdout as it is
generated (token ids without a tokenizer); timings and peak memory go to stderr, or with
--json everything goes into one JSON object on stdout.";

/// The options of `etch generate`.
#[derive(clap::Args, Debug)]
#[command(group(
    clap::ArgGroup::new("prompt_source").required(true).args(["prompt", "prompt_ids"])
))]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelOpts,
    /// A Hugging Face tokenizer.json [default: tokenizer.json in the --weights folder, if
    /// there]
    #[arg(long, value_name = "PATH")]
    pub tokenizer: Option<PathBuf>,
    /// The prompt as text (needs a tokenizer)
    #[arg(long, value_name = "TEXT")]
    pub prompt: Option<String>,
    /// The prompt as token ids, comma-separated
    #[arg(long, value_name = "1,2,3", value_parser = parse_ids)]
    pub prompt_ids: Option<TokenIds>,
    /// Stop after N generated tokens
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub max_new_tokens: usize,
    /// Sampling temperature; 0 is greedy (argmax)
    #[arg(
        long,
        value_name = "T",
        default_value_t = 0.0,
        value_parser = temperature,
        allow_negative_numbers = true
    )]
    pub temperature: f32,
    /// Sample among the K most probable tokens only (0: all)
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub top_k: usize,
    /// Sample among the fewest most probable tokens whose probabilities add up to P (1: all)
    #[arg(long, value_name = "P", default_value_t = 1.0, value_parser = top_p)]
    pub top_p: f32,
    /// Seed of the sampling draws (splitmix64; one uniform draw per generated token, greedy
    /// or not, so a seed gives the same stream every run)
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,
    /// Wrap --prompt in the checkpoint's chat template (chat_template.jinja, or
    /// tokenizer_config.json's chat_template) as one user message, with the generation
    /// prompt
    #[arg(long, conflicts_with = "prompt_ids")]
    pub chat: bool,
    /// Teacher forcing: feed these ids (comma-separated) as the generated tokens, one per
    /// step, whatever the program picks; its picks are still reported (generated_ids) and
    /// compared with them (forced_agreement in --json). Stops after as many steps. For
    /// checking a program against a reference's tokens position by position
    #[arg(long, value_name = "1,2,3", value_parser = parse_ids)]
    pub force_ids: Option<TokenIds>,
    /// Write the logits of every step (the prompt's last position, then each decode step)
    /// as a float32 .npy of shape [steps, vocab]; needs a program that returns logits
    /// (exported with --logits)
    #[arg(long, value_name = "FILE.npy")]
    pub save_logits: Option<PathBuf>,
    /// Print one JSON object (prompt and generated ids, text, timings, memory) instead of
    /// streaming
    #[arg(long)]
    pub json: bool,
    /// Before the timed run, run the prompt's prefill and one decode step once (discarded),
    /// so that the timings leave out first-call work (loading kernel modules, the cuBLAS
    /// handle, growing scratch buffers), as benchmarks that warm up do; the warm-up's
    /// prefill time is reported as warmup_prefill_s
    #[arg(long)]
    pub warmup: bool,
}

/// Token ids given on the command line.
#[derive(Debug, Clone)]
pub struct TokenIds(Vec<i64>);

fn parse_ids(s: &str) -> std::result::Result<TokenIds, String> {
    let ids = s
        .split(',')
        .filter(|x| !x.trim().is_empty())
        .map(|x| {
            x.trim()
                .parse::<i64>()
                .map_err(|_| format!("'{}' is not an integer", x.trim()))
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    if ids.is_empty() {
        return Err("no token ids given".into());
    }
    Ok(TokenIds(ids))
}

fn temperature(s: &str) -> std::result::Result<f32, String> {
    s.parse::<f32>()
        .ok()
        .filter(|t| t.is_finite() && *t >= 0.0)
        .ok_or_else(|| format!("expected a number >= 0, got '{s}'"))
}

fn top_p(s: &str) -> std::result::Result<f32, String> {
    s.parse::<f32>()
        .ok()
        .filter(|p| *p > 0.0 && *p <= 1.0)
        .ok_or_else(|| format!("expected a number in (0, 1], got '{s}'"))
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Eos,
    MaxNewTokens,
    Context,
}

impl Stop {
    fn name(self) -> &'static str {
        match self {
            Stop::Eos => "eos",
            Stop::MaxNewTokens => "max-new-tokens",
            Stop::Context => "context",
        }
    }
}

/// The program, its tokenizer and the checkpoint files, loaded.
struct Loaded {
    program: LlmProgram,
    simulated: Option<std::sync::Arc<etch::SimulatedAllocator>>,
    text: Option<Text>,
    checkpoint: Checkpoint,
    load_s: f64,
    /// Bytes of constants (weights) copied to devices while loading.
    load_bytes: u64,
    /// Seconds of each loading step (opening, metadata, each method), for --json.
    load_steps: Vec<(String, f64)>,
}

impl Loaded {
    /// Bytes copied to devices per second of loading, in GB/s.
    fn load_gb_s(&self) -> f64 {
        self.load_bytes as f64 / 1e9 / self.load_s.max(1e-9)
    }
}

/// Opens the program, finds its convention, loads its methods and the tokenizer.
fn load(a: &GenerateArgs) -> Result<Loaded> {
    let t0 = Instant::now();
    let mut steps = Vec::new();
    let mut lap = {
        let mut last = Instant::now();
        move |name: &str, steps: &mut Vec<(String, f64)>| {
            steps.push((name.to_string(), last.elapsed().as_secs_f64()));
            last = Instant::now();
        }
    };
    let progress = Progress::new(4, !a.json);
    let Opened {
        mut module,
        simulated,
    } = a.model.open(&progress)?;
    lap("open", &mut steps);
    let convention = program::detect(&module)?;
    if convention == Convention::PrefillDecode {
        // prefill and decode share their state (the KV cache): programs exported with
        // share_mutable_buffers plan it in the same place of each method's arenas.
        module = module.with_shared_arenas(true);
    }
    progress.step("reading metadata");
    let mut program = LlmProgram::new(module, convention)?;
    progress.inc();
    lap("metadata", &mut steps);
    let methods = program.methods();
    // Weights copied to devices while the methods load: a byte count for the bar.
    let uploads = program.module.device_constants();
    let total = device_constant_bytes(&program.module, &methods);
    progress.step(format!("loading {}", methods.join(", ")));
    progress.bytes(
        total,
        || uploads.uploaded_bytes(),
        || -> Result<()> {
            for name in &methods {
                program.module.load_method(name)?;
                lap(&format!("load {name}"), &mut steps);
            }
            Ok(())
        },
    )?;
    progress.inc();
    let tokenizer = a
        .tokenizer
        .clone()
        .or_else(|| Checkpoint::default_tokenizer(&a.model.weights));
    let text = match &tokenizer {
        Some(p) => {
            progress.step(format!("reading {}", p.display()));
            Some(Text::load(p)?)
        }
        None => None,
    };
    progress.inc();
    progress.finish();
    Ok(Loaded {
        program,
        simulated,
        text,
        checkpoint: Checkpoint::new(tokenizer.as_deref(), &a.model.weights),
        load_s: t0.elapsed().as_secs_f64(),
        load_bytes: uploads.uploaded_bytes(),
        load_steps: steps,
    })
}

/// The prompt's token ids, and its text when given as text (after the chat template).
fn prompt_ids(a: &GenerateArgs, l: &Loaded) -> Result<(Vec<i64>, Option<String>)> {
    if let Some(ids) = &a.prompt_ids {
        return Ok((ids.0.clone(), None));
    }
    let prompt = a.prompt.as_deref().unwrap_or_default();
    let text = l.text.as_ref().ok_or_else(|| {
        Error::invalid_argument(
            "--prompt needs a tokenizer: pass --tokenizer tokenizer.json (or --weights with a \
             checkpoint folder that has one), or give --prompt-ids",
        )
    })?;
    if !a.chat {
        return Ok((text.encode(prompt, true)?, Some(prompt.to_string())));
    }
    let (template, source) = l.checkpoint.chat_template()?;
    let rendered = text::render_chat(&template, &source, prompt, &l.checkpoint.special_tokens()?)?;
    // The template writes the special tokens itself, as apply_chat_template does.
    Ok((text.encode(&rendered, false)?, Some(rendered)))
}

/// What a generation produced.
struct Generated {
    ids: Vec<i64>,
    stop: Stop,
    ttft_s: f64,
    prefill_s: f64,
    decode_s: f64,
    /// The warm-up's prefill (the first call, cold), when --warmup.
    warmup_prefill_s: Option<f64>,
    /// Decode calls made, and the host ↔ device traffic during them (device programs).
    decode_calls: usize,
    decode_transfers: Option<etch::TransferStats>,
    /// How the device delegates' calls of the decode steps ran (CUDA graphs or op by op).
    decode_graphs: etch::GraphCounts,
}

/// Prefill, then decode one token per call until an EOS id, `max_new` tokens or the
/// context limit. `emit` sees each token as it is generated.
fn generate(
    p: &mut LlmProgram,
    prompt: &[i64],
    eos: &[i64],
    a: &GenerateArgs,
    transfers: impl Fn(&LlmProgram) -> Option<etch::TransferStats>,
    mut emit: impl FnMut(i64) -> Result<()>,
) -> Result<Generated> {
    let context = p.context_len();
    if prompt.len() > context {
        return Err(Error::invalid_argument(format!(
            "the prompt ({} tokens) is longer than the program's context ({context})",
            prompt.len()
        )));
    }
    let s = Sampling {
        temperature: a.temperature,
        top_k: a.top_k,
        top_p: a.top_p,
    };
    let mut rng = SplitMix64::new(a.seed);
    let forced = a.force_ids.as_ref().map(|f| f.0.as_slice());
    let max_new = forced.map_or(a.max_new_tokens, |f| f.len());
    if let Some(f) = forced {
        p.check_ids(f, "--force-ids")?;
    }
    let warmup_prefill_s = if a.warmup {
        Some(warm_up(p, prompt, &s)?)
    } else {
        None
    };
    if a.save_logits.is_some() {
        p.logits_log = Some(Vec::new());
    }
    let t1 = Instant::now();
    let mut next = p.prefill(prompt, &s, rng.next_f32())?;
    let prefill_s = t1.elapsed().as_secs_f64();
    let mut pos = prompt.len();
    let mut ids = Vec::with_capacity(max_new);
    let mut stop = Stop::MaxNewTokens;
    let mut decode_calls = 0;
    // Each decode step's uniform number, drawn now in the order the steps use them; a
    // program whose decode inputs live on the device gets its position and sampling tables
    // uploaded here, once (see LlmProgram::prepare_decode).
    let us: Vec<f32> = (1..max_new).map(|_| rng.next_f32()).collect();
    p.prepare_decode(pos, &s, &us)?;
    let before = transfers(p);
    let graphs_before = etch::graph_counts();
    let t2 = Instant::now();
    while ids.len() < max_new {
        ids.push(next);
        emit(next)?;
        // Under teacher forcing the next input is the forced id, EOS or not.
        let fed = forced.map_or(next, |f| f[ids.len() - 1]);
        if forced.is_none() && eos.contains(&next) {
            stop = Stop::Eos;
            break;
        }
        if ids.len() == max_new {
            break;
        }
        if pos >= context {
            stop = Stop::Context;
            break;
        }
        next = p.decode(fed, pos, &s, us[decode_calls])?;
        decode_calls += 1;
        pos += 1;
    }
    let decode_s = t2.elapsed().as_secs_f64();
    let decode_graphs = etch::graph_counts().since(graphs_before);
    Ok(Generated {
        ids,
        stop,
        ttft_s: prefill_s,
        prefill_s,
        warmup_prefill_s,
        decode_s,
        decode_calls,
        decode_transfers: transfers(p).zip(before).map(|(after, b)| after.since(b)),
        decode_graphs,
    })
}

/// One discarded prefill of the prompt and one decode step; returns the prefill's seconds.
/// The timed run starts again at position 0, which overwrites what this left in the state
/// (KV caches are read only up to the current position; recurrent states restart).
fn warm_up(p: &mut LlmProgram, prompt: &[i64], s: &Sampling) -> Result<f64> {
    let t = Instant::now();
    let next = p.prefill(prompt, s, 0.5)?;
    let secs = t.elapsed().as_secs_f64();
    if prompt.len() < p.context_len() {
        p.decode(next, prompt.len(), s, 0.5)?;
    }
    Ok(secs)
}

/// Writes text to stdout now.
fn print_now(s: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(s.as_bytes())
        .and_then(|_| out.flush())
        .map_err(|e| Error::access_failed(format!("cannot write to stdout: {e}")))
}

/// `etch generate MODEL.pte (--prompt TEXT | --prompt-ids 1,2,3) [...]`.
pub fn cmd_generate(a: &GenerateArgs) -> Result<()> {
    let mut l = load(a)?;
    let t_prompt = Instant::now();
    let (prompt, prompt_text) = prompt_ids(a, &l)?;
    l.program.check_ids(&prompt, "the prompt")?;
    let encode_s = t_prompt.elapsed().as_secs_f64();
    let mut eos = l.program.meta.eos_ids.clone();
    if eos.is_empty() {
        eos = l.checkpoint.eos_ids()?;
    }
    let mut stream = l.text.as_ref().map(TextStream::new);
    let streaming = !a.json;
    let sim = l.simulated.clone();
    let transfers = |p: &LlmProgram| device_transfers(sim.as_deref(), &p.module);
    let mut g = generate(&mut l.program, &prompt, &eos, a, transfers, |id| {
        if !streaming {
            return Ok(());
        }
        match &mut stream {
            Some(s) => print_now(&s.push(Text::ids(&[id])?[0])?),
            None => print_now(&format!("{id} ")),
        }
    })?;
    g.ttft_s += encode_s;
    if let Some(path) = &a.save_logits {
        save_logits(
            path,
            l.program.logits_log.take().unwrap_or_default(),
            g.ids.len(),
        )?;
    }
    let text = match &l.text {
        Some(t) => t.decode(&Text::ids(&g.ids)?)?,
        None => String::new(),
    };
    if streaming {
        if let Some(s) = &mut stream {
            print_now(&s.finish()?)?;
        }
        print_now("\n")?;
    }
    report(a, &l, &prompt, prompt_text, &g, &text, &eos)
}

/// Writes the logged logits of `steps` steps as a float32 `[steps, vocab]` .npy.
fn save_logits(path: &std::path::Path, log: Vec<f32>, steps: usize) -> Result<()> {
    if log.is_empty() || steps == 0 || !log.len().is_multiple_of(steps) {
        return Err(Error::invalid_argument(
            "--save-logits needs a program that returns logits (export it with --logits); \
             this one samples on the device",
        ));
    }
    let vocab = log.len() / steps;
    etch::npy::write(path, &etch::Tensor::from_slice(&log, &[steps, vocab])?)
}

/// The closing figures: one JSON object on stdout with --json, else a line on stderr.
fn report(
    a: &GenerateArgs,
    l: &Loaded,
    prompt: &[i64],
    prompt_text: Option<String>,
    g: &Generated,
    text: &str,
    eos: &[i64],
) -> Result<()> {
    let prefill_tok_s = prompt.len() as f64 / g.prefill_s.max(1e-9);
    // The first token comes from prefill; decode made the rest.
    let decoded = g.ids.len().saturating_sub(1);
    let decode_tok_s = if decoded == 0 {
        0.0
    } else {
        decoded as f64 / g.decode_s.max(1e-9)
    };
    let peak_host = proc_status_bytes("VmHWM");
    let peak_device = peak_device_bytes(l.simulated.as_deref(), &l.program.module);
    let p = &l.program;
    let context = p.context_len();
    if a.json {
        let mut j = json!({
            "prompt_ids": prompt,
            "generated_ids": g.ids,
            "text": text,
            "prompt_text": prompt_text,
            "stop": g.stop.name(),
            "load_s": l.load_s,
            "load_bytes": l.load_bytes,
            "load_gb_s": l.load_gb_s(),
            "load_steps_s": l.load_steps.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
            "ttft_s": g.ttft_s,
            "prefill_tok_s": prefill_tok_s,
            "warmup_prefill_s": g.warmup_prefill_s,
            "decode_tok_s": decode_tok_s,
            "convention": p.convention.name(),
            "sampled_on": p.device_sampled.map(|d| if d { "device" } else { "host" }),
            "seed": a.seed,
            "eos_ids": eos,
            "context_len": (context != usize::MAX).then_some(context),
            "metadata": {
                "max_seq_len": p.meta.max_seq_len,
                "max_context_len": p.meta.max_context_len,
                "vocab_size": p.meta.vocab_size,
                "bos_id": p.meta.bos_id,
                "n_layers": p.meta.n_layers,
            },
            "peak_host_bytes": peak_host,
            "peak_device_bytes": peak_device.as_ref().map(|d| d.1),
            "decode_calls": g.decode_calls,
            "decode_transfers": g.decode_transfers.map(|t| json!({
                "h2d_bytes": t.h2d_bytes,
                "h2d_copies": t.h2d_copies,
                "d2h_bytes": t.d2h_bytes,
                "d2h_copies": t.d2h_copies,
            })),
            "decode_graphs": (g.decode_graphs.calls() > 0).then(|| json!({
                "recorded": g.decode_graphs.recorded,
                "replayed": g.decode_graphs.replayed,
                "op_by_op": g.decode_graphs.op_by_op,
            })),
        });
        if let Some(f) = &a.force_ids {
            let same = f.0.iter().zip(&g.ids).filter(|(x, y)| x == y).count();
            j["forced_ids"] = json!(f.0);
            j["forced_agreement"] = json!(same);
        }
        println!("{j}");
        return Ok(());
    }
    if g.stop == Stop::Context {
        eprintln!("stopped at the program's context length ({context} tokens)");
    }
    let uploaded = if l.load_bytes > 0 {
        format!(
            " ({} to the device, {:.2} GB/s)",
            decimal_bytes(l.load_bytes),
            l.load_gb_s()
        )
    } else {
        String::new()
    };
    let mut line = format!(
        "load {:.3} s{uploaded} | time to first token {:.3} s | prefill {} tokens, {prefill_tok_s:.1} tok/s | decode {decoded} tokens, {decode_tok_s:.1} tok/s",
        l.load_s,
        g.ttft_s,
        prompt.len(),
    );
    if let Some(b) = peak_host {
        line.push_str(&format!(" | peak host RSS {}", mib(b)));
    }
    if let Some((dev, b)) = peak_device {
        line.push_str(&format!(" | peak device memory {} ({dev})", mib(b)));
    }
    if let (Some(t), n @ 1..) = (g.decode_transfers, g.decode_calls) {
        let n = n as u64;
        line.push_str(&format!(
            " | per decode step {} B up in {:.1} copies, {} B down in {:.1}",
            t.h2d_bytes / n,
            t.h2d_copies as f64 / n as f64,
            t.d2h_bytes / n,
            t.d2h_copies as f64 / n as f64
        ));
    }
    line.push_str(&graphs_summary(g.decode_graphs));
    eprintln!("{line}");
    Ok(())
}

/// How the decode steps' device delegate calls ran, for the closing line ("" without any).
fn graphs_summary(c: etch::GraphCounts) -> String {
    match c.calls() {
        0 => String::new(),
        n if c.replayed + c.recorded > 0 => format!(
            " | decode as a CUDA graph: {} of {n} delegate calls replayed, {} recorded",
            c.replayed, c.recorded
        ),
        n if !etch::cuda_graphs() => {
            format!(" | decode op by op ({n} delegate calls; CUDA graphs off)")
        }
        n => format!(" | decode op by op ({n} delegate calls)"),
    }
}
