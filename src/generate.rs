//! `etch generate`: greedy token generation with ExecuTorch's LLM runner convention,
//! `forward(tokens[1, T], input_pos[1]) -> logits` with the KV cache inside the program
//! (stock `export_llm` programs), plus its metadata methods (`get_max_seq_len`,
//! `get_eos_ids`, `enable_dynamic_shape`, ...).

use crate::{Opts, RUN_FLAGS, open_module};
use etch::{Error, Module, Result, Tensor, Value};
use serde_json::json;
use std::io::Write;
use std::time::Instant;

/// An Int (or Bool) returned by metadata method `name`, if the program has it.
fn meta_int(m: &mut Module, name: &str) -> Result<Option<i64>> {
    if !m.method_names().iter().any(|n| n == name) {
        return Ok(None);
    }
    Ok(match m.execute(name, &[])?.first() {
        Some(Value::Int(v)) => Some(*v),
        Some(Value::Bool(b)) => Some(*b as i64),
        _ => None,
    })
}

/// The end-of-sequence ids the program declares (`get_eos_ids`, or `get_eos_id`).
fn eos_ids(m: &mut Module) -> Result<Vec<i64>> {
    for name in ["get_eos_ids", "get_eos_id"] {
        if !m.method_names().iter().any(|n| n == name) {
            continue;
        }
        let mut ids = Vec::new();
        for v in m.execute(name, &[])? {
            match v {
                Value::Int(x) => ids.push(x),
                Value::Tensor(t) => ids.extend(t.to_cpu()?.to_f64_vec()?.iter().map(|&x| x as i64)),
                _ => {}
            }
        }
        return Ok(ids);
    }
    Ok(Vec::new())
}

fn parse_ids(s: &str) -> Result<Vec<i64>> {
    s.split(',')
        .filter(|x| !x.trim().is_empty())
        .map(|x| {
            x.trim().parse::<i64>().map_err(|_| {
                Error::invalid_argument(format!("--prompt-ids: '{x}' is not an integer"))
            })
        })
        .collect()
}

/// Runs `forward` on `tokens` at position `pos`; returns the argmax of the last position's
/// logits.
fn step(m: &mut Module, tokens: &[i64], pos: i64) -> Result<i64> {
    let t = Tensor::from_slice(tokens, &[1, tokens.len()])?;
    let p = Tensor::from_slice(&[pos], &[1])?;
    let out = m.execute("forward", &[Value::Tensor(t), Value::Tensor(p)])?;
    let Some(Value::Tensor(logits)) = out.first() else {
        return Err(Error::invalid_program(
            "forward must return logits (a tensor) as its first output",
        ));
    };
    let logits = if logits.is_cpu() {
        logits.clone()
    } else {
        logits.to_cpu()?
    };
    let v = logits.to_f64_vec()?;
    let vocab = *logits
        .sizes()
        .last()
        .ok_or_else(|| Error::invalid_program("forward returned 0-d logits"))?;
    if vocab == 0 || v.len() < vocab {
        return Err(Error::invalid_program("forward returned empty logits"));
    }
    let last = &v[v.len() - vocab..];
    let mut best = 0usize;
    for (i, &x) in last.iter().enumerate() {
        // First maximum wins; NaN never does.
        if x > last[best] || last[best].is_nan() {
            best = i;
        }
    }
    Ok(best as i64)
}

/// `etch generate MODEL.pte --prompt-ids 1,2,3 [--max-new-tokens N] [--json]` plus run's
/// device and data options.
pub(crate) fn cmd_generate(args: &[String]) -> Result<()> {
    let mut flags = RUN_FLAGS.to_vec();
    flags.extend(["prompt-ids", "max-new-tokens"]);
    let o = Opts::parse(args, &flags, &["json", "no-cuda-graphs", "convert-dtype"])?;
    let prompt = parse_ids(o.one("prompt-ids").ok_or_else(|| {
        Error::invalid_argument("--prompt-ids is required (e.g. --prompt-ids 1,2,3)")
    })?)?;
    if prompt.is_empty() {
        return Err(Error::invalid_argument("--prompt-ids is empty"));
    }
    let max_new: usize = match o.one("max-new-tokens") {
        Some(s) => s
            .parse()
            .map_err(|_| Error::invalid_argument(format!("--max-new-tokens: '{s}'")))?,
        None => 32,
    };
    let t0 = Instant::now();
    let (mut m, _sim) = open_module(&o)?;
    if !m.method_names().iter().any(|n| n == "forward") {
        return Err(Error::not_found(
            "the program has no `forward` method (etch generate needs forward(tokens, input_pos))",
        ));
    }
    let meta = m.method_meta("forward")?;
    if meta.num_inputs() != 2 {
        return Err(Error::not_supported(format!(
            "forward takes {} inputs; etch generate needs forward(tokens[1, T], input_pos[1])",
            meta.num_inputs()
        )));
    }
    let max_seq = meta_int(&mut m, "get_max_seq_len")?.unwrap_or(i64::MAX);
    let dynamic = meta_int(&mut m, "enable_dynamic_shape")?.unwrap_or(0) != 0;
    let chunk = if dynamic {
        meta.inputs()
            .first()
            .and_then(|i| i.tensor.as_ref())
            .and_then(|t| t.sizes.get(1).copied())
            .unwrap_or(1)
            .max(1)
    } else {
        1
    };
    let eos = eos_ids(&mut m)?;
    m.load_method("forward")?;
    let load_s = t0.elapsed().as_secs_f64();
    let json = o.has("json");
    let mut out = std::io::stdout();

    // Prefill: the prompt in chunks as long as the program takes.
    let t1 = Instant::now();
    let mut pos = 0i64;
    let mut next = 0i64;
    for c in prompt.chunks(chunk) {
        if pos + c.len() as i64 > max_seq {
            return Err(Error::invalid_argument(format!(
                "the prompt ({} tokens) is longer than the program's context ({max_seq})",
                prompt.len()
            )));
        }
        next = step(&mut m, c, pos)?;
        pos += c.len() as i64;
    }
    let prefill_s = t1.elapsed().as_secs_f64();
    let ttft_s = load_s + prefill_s;

    // Decode one token per call.
    let mut generated = Vec::with_capacity(max_new);
    let t2 = Instant::now();
    let mut stop = "max-new-tokens";
    while generated.len() < max_new {
        generated.push(next);
        if !json {
            print!("{next} ");
            let _ = out.flush();
        }
        if eos.contains(&next) {
            stop = "eos";
            break;
        }
        if generated.len() == max_new {
            break;
        }
        if pos >= max_seq {
            stop = "context";
            break;
        }
        next = step(&mut m, &[next], pos)?;
        pos += 1;
    }
    let decode_s = t2.elapsed().as_secs_f64();
    let decoded = generated.len().saturating_sub(1).max(1) as f64;
    let prefill_tok_s = prompt.len() as f64 / prefill_s.max(1e-9);
    let decode_tok_s = decoded / decode_s.max(1e-9);
    if json {
        let j = json!({
            "prompt_ids": prompt,
            "generated_ids": generated,
            "stop": stop,
            "load_s": load_s,
            "ttft_s": ttft_s,
            "prefill_tok_s": prefill_tok_s,
            "decode_tok_s": decode_tok_s,
        });
        println!("{j}");
    } else {
        println!();
        if stop == "context" {
            eprintln!("stopped at the program's context length ({max_seq} tokens)");
        }
        eprintln!(
            "load {load_s:.3} s | time to first token {ttft_s:.3} s | prefill {prefill_tok_s:.1} tok/s | decode {decode_tok_s:.1} tok/s"
        );
    }
    Ok(())
}
