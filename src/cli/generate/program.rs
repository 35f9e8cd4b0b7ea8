//! The LLM program conventions `etch generate` runs, found from method names and input
//! counts (never from file names):
//!
//! - **prefill/decode** (etch's Qwen 3.5 convention): methods `prefill(tokens i64[1, T],
//!   input_pos i64[1], sampling f32[4])` and `decode(tokens i64[1, 1], input_pos i64[1],
//!   sampling f32[4])`, sharing their state (the KV cache, exported with
//!   `share_mutable_buffers`; the module shares its planned arenas). `sampling` is
//!   `[temperature, top_k, top_p, u]`. Chosen when both methods exist.
//! - **forward** (ExecuTorch's LLM runner, `export_llm`): `forward(tokens i64[1, T],
//!   input_pos i64[1])` for prefill and decode, the KV cache inside. Chosen otherwise.
//!
//! Either method may take the `sampling` input (3 inputs) or not (2). What a call returns
//! decides who samples: an integer tensor (or Int) is the sampled token id; a float tensor
//! is logits `[1, V]` or `[1, T, V]` (the last position), which the host samples with
//! [`etch::sample_row`] and the same `u`.

use etch::{Device, Dynamism, Error, Module, Result, ScalarType, Tag, Tensor, Value};

/// Which convention a program follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Convention {
    /// `forward(tokens, input_pos)` for both phases.
    Forward,
    /// `prefill(...)` and `decode(...)`.
    PrefillDecode,
}

impl Convention {
    pub fn name(self) -> &'static str {
        match self {
            Convention::Forward => "forward",
            Convention::PrefillDecode => "prefill/decode",
        }
    }
}

/// A method that takes tokens.
#[derive(Debug, Clone)]
pub struct StepMethod {
    pub name: String,
    /// Takes the `sampling` f32[4] input.
    pub takes_sampling: bool,
    /// Most tokens one call takes (the static length, or the dynamic bound).
    pub max_tokens: usize,
    /// The token dimension is dynamic (any length up to `max_tokens`).
    pub dynamic: bool,
    /// The device every input lives on, when not the host (a program lowered with
    /// `etch lower --skip-h2d-inputs`): decoding then keeps its inputs there.
    pub input_device: Option<Device>,
}

/// The optional metadata methods.
#[derive(Debug, Clone, Default)]
pub struct Metadata {
    pub max_seq_len: Option<i64>,
    pub max_context_len: Option<i64>,
    pub vocab_size: Option<i64>,
    pub bos_id: Option<i64>,
    pub eos_ids: Vec<i64>,
    pub use_kv_cache: Option<bool>,
    pub enable_dynamic_shape: Option<bool>,
    pub n_layers: Option<i64>,
}

/// What one call gave.
pub enum Output {
    /// A token id the program sampled.
    Token(i64),
    /// The last position's logits, for the host to sample.
    Logits(Vec<f32>),
}

/// The sampling options, as the `sampling` input carries them.
#[derive(Debug, Clone, Copy)]
pub struct Sampling {
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
}

impl Sampling {
    /// `[temperature, top_k, top_p, u]`.
    fn input(&self, u: f32) -> [f32; 4] {
        [self.temperature, self.top_k as f32, self.top_p, u]
    }

    /// Greedy (as `etch::sample` decides): `u` does not matter.
    fn greedy(&self) -> bool {
        self.temperature.is_nan() || self.temperature <= 0.0 || self.top_k == 1
    }
}

/// Decode inputs kept on the device for a method whose inputs live there: per step the
/// token is the previous step's sampled id copied on the device (uploaded only when the
/// caller feeds another one, e.g. under teacher forcing), the position a row of a table
/// uploaded once, the sampling numbers a row of a table uploaded once (one row when
/// greedy). Device-to-device copies only: nothing crosses PCIe upward per step.
struct DeviceInputs {
    token: Tensor,
    pos: Tensor,
    sampling: Tensor,
    /// Positions `first ..` and, row for row, their sampling numbers, on the device.
    first: usize,
    pos_table: Tensor,
    sampling_table: Tensor,
}

/// A loaded LLM program.
pub struct LlmProgram {
    pub module: Module,
    pub convention: Convention,
    pub prefill: StepMethod,
    pub decode: StepMethod,
    pub meta: Metadata,
    /// Whether the last call's output was sampled on the device.
    pub device_sampled: Option<bool>,
    /// When set, every call's logits are appended here (`etch generate --save-logits`).
    pub logits_log: Option<Vec<f32>>,
    /// Decode inputs on the device (see [`LlmProgram::prepare_decode`]).
    device_inputs: Option<DeviceInputs>,
    /// The last call's token id as the device returned it (a device integer tensor).
    last_device_out: Option<(Tensor, i64)>,
}

fn has(m: &Module, name: &str) -> bool {
    m.method_names().iter().any(|n| n == name)
}

/// Which convention the program's methods follow (see the module docs).
pub fn detect(m: &Module) -> Result<Convention> {
    match (has(m, "prefill"), has(m, "decode")) {
        (true, true) => Ok(Convention::PrefillDecode),
        (true, false) | (false, true) => Err(Error::not_supported(
            "the program has only one of `prefill` and `decode`; etch generate needs both \
             (or ExecuTorch's forward(tokens, input_pos))",
        )),
        (false, false) if has(m, "forward") => Ok(Convention::Forward),
        _ => Err(Error::not_found(
            "the program has no `forward` method, nor `prefill` and `decode`: etch generate \
             needs forward(tokens[1, T], input_pos[1]) or prefill/decode(tokens, input_pos, \
             sampling)",
        )),
    }
}

/// An Int (or Bool) returned by metadata method `name`, if the program has it.
fn meta_int(m: &mut Module, name: &str) -> Result<Option<i64>> {
    if !has(m, name) {
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
        if !has(m, name) {
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

/// Reads every metadata method the program has.
pub fn read_metadata(m: &mut Module) -> Result<Metadata> {
    Ok(Metadata {
        max_seq_len: meta_int(m, "get_max_seq_len")?,
        max_context_len: meta_int(m, "get_max_context_len")?,
        vocab_size: meta_int(m, "get_vocab_size")?,
        bos_id: meta_int(m, "get_bos_id")?,
        eos_ids: eos_ids(m)?,
        use_kv_cache: meta_int(m, "use_kv_cache")?.map(|v| v != 0),
        enable_dynamic_shape: meta_int(m, "enable_dynamic_shape")?.map(|v| v != 0),
        n_layers: meta_int(m, "get_n_layers")?,
    })
}

/// Checks a method's inputs against `(tokens i64[1, T], input_pos i64[1][, sampling
/// f32[4]])` and describes it.
fn step_method(m: &Module, name: &str, meta: &Metadata) -> Result<StepMethod> {
    let mm = m.method_meta(name)?;
    let want = "(tokens i64[1, T], input_pos i64[1]) or (tokens, input_pos, sampling f32[4])";
    let bad = |why: String| Error::not_supported(format!("method '{name}' {why}; expected {want}"));
    let inputs = mm.inputs();
    if !(2..=3).contains(&inputs.len()) {
        return Err(bad(format!("takes {} inputs", inputs.len())));
    }
    let tensor = |i: usize| match (&inputs[i].tag, &inputs[i].tensor) {
        (Tag::Tensor, Some(t)) => Ok(t),
        _ => Err(bad(format!("input {i} is not a tensor"))),
    };
    let tokens = tensor(0)?;
    if tokens.dtype != ScalarType::Long || tokens.sizes.len() != 2 || tokens.sizes[1] == 0 {
        return Err(bad(format!(
            "input 0 is {} {:?}",
            tokens.dtype, tokens.sizes
        )));
    }
    if tensor(1)?.dtype != ScalarType::Long {
        return Err(bad("input 1 (input_pos) is not int64".into()));
    }
    let takes_sampling = inputs.len() == 3;
    if takes_sampling {
        let s = tensor(2)?;
        if s.dtype != ScalarType::Float || s.sizes.iter().product::<usize>() != 4 {
            return Err(bad(format!(
                "input 2 (sampling) is {} {:?}",
                s.dtype, s.sizes
            )));
        }
    }
    // A dynamic token dimension, unless the program says enable_dynamic_shape = false.
    let dynamic = tokens.dynamism != Dynamism::Static && meta.enable_dynamic_shape.unwrap_or(true);
    let mut max_tokens = tokens.sizes[1];
    if let Some(s) = meta.max_seq_len.filter(|&s| s > 0) {
        max_tokens = max_tokens.min(s as usize);
    }
    let first = tokens.device;
    let input_device = (!first.is_cpu()
        && inputs
            .iter()
            .all(|i| i.tensor.as_ref().is_some_and(|t| t.device == first)))
    .then_some(first);
    Ok(StepMethod {
        name: name.to_string(),
        takes_sampling,
        max_tokens,
        dynamic,
        input_device,
    })
}

impl LlmProgram {
    /// Describes the program's methods (loads nothing but the metadata methods).
    pub fn new(mut module: Module, convention: Convention) -> Result<LlmProgram> {
        let meta = read_metadata(&mut module)?;
        if meta.use_kv_cache == Some(false) {
            return Err(Error::not_supported(
                "the program has no KV cache (use_kv_cache = false); etch generate runs \
                 programs that keep the cache inside",
            ));
        }
        let (prefill, decode) = match convention {
            Convention::Forward => {
                let f = step_method(&module, "forward", &meta)?;
                (f.clone(), f)
            }
            Convention::PrefillDecode => (
                step_method(&module, "prefill", &meta)?,
                step_method(&module, "decode", &meta)?,
            ),
        };
        if !decode.dynamic && decode.max_tokens != 1 {
            return Err(Error::not_supported(format!(
                "method '{}' takes exactly {} tokens per call (a static shape); decoding \
                 feeds one token per call",
                decode.name, decode.max_tokens
            )));
        }
        Ok(LlmProgram {
            module,
            convention,
            prefill,
            decode,
            meta,
            device_sampled: None,
            logits_log: None,
            device_inputs: None,
            last_device_out: None,
        })
    }

    /// The methods to load, in order.
    pub fn methods(&self) -> Vec<String> {
        let mut v = vec![self.prefill.name.clone()];
        if self.decode.name != self.prefill.name {
            v.push(self.decode.name.clone());
        }
        v
    }

    /// The most tokens the KV cache holds: `get_max_context_len`, else `get_max_seq_len`,
    /// else unbounded.
    pub fn context_len(&self) -> usize {
        self.meta
            .max_context_len
            .or(self.meta.max_seq_len)
            .filter(|&c| c > 0)
            .map_or(usize::MAX, |c| c as usize)
    }

    /// Checks token ids against the program's vocabulary.
    pub fn check_ids(&self, ids: &[i64], what: &str) -> Result<()> {
        let vocab = self.meta.vocab_size.unwrap_or(i64::MAX);
        match ids.iter().find(|&&t| t < 0 || t >= vocab) {
            Some(t) => Err(Error::invalid_argument(format!(
                "{what}: token id {t} is outside the program's vocabulary ({vocab} ids)"
            ))),
            None => Ok(()),
        }
    }

    /// One call of `method` on `tokens` at position `pos`.
    fn call(
        &mut self,
        prefill: bool,
        tokens: &[i64],
        pos: usize,
        s: &Sampling,
        u: f32,
    ) -> Result<Output> {
        let m = if prefill { &self.prefill } else { &self.decode };
        let mut inputs = vec![
            Value::Tensor(Tensor::from_slice(tokens, &[1, tokens.len()])?),
            Value::Tensor(Tensor::from_slice(&[pos as i64], &[1])?),
        ];
        if m.takes_sampling {
            inputs.push(Value::Tensor(Tensor::from_slice(&s.input(u), &[4])?));
        }
        self.run(prefill, &inputs)
    }

    /// Executes the prefill or decode method on `inputs` and reads its output.
    fn run(&mut self, prefill: bool, inputs: &[Value]) -> Result<Output> {
        let name = if prefill {
            &self.prefill.name
        } else {
            &self.decode.name
        }
        .clone();
        let out = self.module.execute(&name, inputs)?;
        self.last_device_out = None;
        let bad =
            || Error::invalid_program(format!("'{name}' must return a token id or logits first"));
        let (t, on_device) = match out.into_iter().next() {
            Some(Value::Int(x)) => return Ok(Output::Token(x)),
            Some(Value::Tensor(t)) if t.is_cpu() => (t, None),
            Some(Value::Tensor(t)) => (t.to_cpu()?, Some(t)),
            _ => return Err(bad()),
        };
        if t.dtype().is_integral() {
            let ids = t.to_f64_vec()?;
            let id = ids.last().map(|&x| x as i64).ok_or_else(bad)?;
            if let Some(d) = on_device.filter(|d| d.dtype() == ScalarType::Long) {
                self.last_device_out = Some((d, id));
            }
            return Ok(Output::Token(id));
        }
        if !t.dtype().is_floating() {
            return Err(bad());
        }
        let v = t.to_f64_vec()?;
        let vocab = t.sizes().last().copied().unwrap_or(0);
        if vocab == 0 || v.len() < vocab {
            return Err(Error::invalid_program(format!(
                "'{name}' returned empty logits"
            )));
        }
        Ok(Output::Logits(
            v[v.len() - vocab..].iter().map(|&x| x as f32).collect(),
        ))
    }

    /// When the decode method's inputs live on a device, allocates the device inputs for
    /// up to `us.len()` decode steps from position `first` and uploads their position and
    /// sampling tables (once: a greedy run needs one sampling row). `us` are the steps'
    /// uniform numbers, in order. Without device inputs this does nothing.
    pub fn prepare_decode(&mut self, first: usize, s: &Sampling, us: &[f32]) -> Result<()> {
        self.device_inputs = None;
        let Some(dev) = self.decode.input_device else {
            return Ok(());
        };
        let reg = self.module.devices();
        let n = us.len().max(1);
        let positions: Vec<i64> = (first..first + n).map(|p| p as i64).collect();
        let rows: Vec<f32> = if s.greedy() {
            s.input(us.first().copied().unwrap_or(0.5)).to_vec()
        } else {
            us.iter().flat_map(|&u| s.input(u)).collect()
        };
        let mut sampling = Tensor::empty_on(ScalarType::Float, &[4], dev, &reg)?;
        let sampling_table = Tensor::from_slice_on(&rows, &[rows.len()], dev, &reg)?;
        sampling.copy_from(&sampling_table, 0)?;
        self.device_inputs = Some(DeviceInputs {
            token: Tensor::empty_on(ScalarType::Long, &[1, 1], dev, &reg)?,
            pos: Tensor::empty_on(ScalarType::Long, &[1], dev, &reg)?,
            sampling,
            first,
            pos_table: Tensor::from_slice_on(&positions, &[n], dev, &reg)?,
            sampling_table,
        });
        Ok(())
    }

    /// A decode call from the device inputs (see [`DeviceInputs`]).
    fn decode_on_device(&mut self, token: i64, pos: usize) -> Result<Output> {
        let takes_sampling = self.decode.takes_sampling;
        let last = self.last_device_out.take();
        let d = self
            .device_inputs
            .as_mut()
            .ok_or_else(|| Error::internal("no device inputs"))?;
        match last {
            Some((t, id)) if id == token => d.token.copy_from(&t, t.numel() - 1)?,
            _ => d
                .token
                .copy_from(&Tensor::from_slice(&[token], &[1, 1])?, 0)?,
        }
        let row = pos
            .checked_sub(d.first)
            .filter(|&r| r < d.pos_table.numel());
        let row = row.ok_or_else(|| {
            Error::internal(format!("decode position {pos} outside the prepared table"))
        })?;
        d.pos.copy_from(&d.pos_table, row)?;
        // Row 0 (the only one when greedy) was copied by prepare_decode.
        if row > 0 && d.sampling_table.numel() > 4 {
            d.sampling.copy_from(&d.sampling_table, 4 * row)?;
        }
        let mut inputs = vec![Value::Tensor(d.token.clone()), Value::Tensor(d.pos.clone())];
        if takes_sampling {
            inputs.push(Value::Tensor(d.sampling.clone()));
        }
        self.run(false, &inputs)
    }

    /// The next token from a call's output: the program's, or sampled here.
    fn pick(&mut self, out: Output, s: &Sampling, u: f32) -> Result<i64> {
        let id = match out {
            Output::Token(t) => {
                self.device_sampled = Some(true);
                t
            }
            Output::Logits(l) => {
                self.device_sampled = Some(false);
                if let Some(log) = &mut self.logits_log {
                    log.extend_from_slice(&l);
                }
                etch::sample_row(&l, s.temperature, s.top_k, s.top_p, u) as i64
            }
        };
        self.check_ids(&[id], "the program returned")?;
        Ok(id)
    }

    /// Feeds the prompt (starting at position 0) and returns the first generated token.
    /// A dynamic prefill takes it in one call (in chunks of the dynamic bound when longer);
    /// a static one in chunks of its length, the remainder through `decode` one token at a
    /// time. Every call gets the same `u`: one draw per generated token.
    pub fn prefill(&mut self, prompt: &[i64], s: &Sampling, u: f32) -> Result<i64> {
        // A new sequence: the device inputs of the last one no longer apply.
        self.device_inputs = None;
        let chunk = self.prefill.max_tokens.max(1);
        let whole = if self.prefill.dynamic {
            prompt.len()
        } else {
            prompt.len() / chunk * chunk
        };
        let mut out = None;
        let mut pos = 0;
        for c in prompt[..whole].chunks(chunk) {
            out = Some(self.call(true, c, pos, s, u)?);
            pos += c.len();
        }
        for &t in &prompt[whole..] {
            out = Some(self.call(false, &[t], pos, s, u)?);
            pos += 1;
        }
        let out = out.ok_or_else(|| Error::invalid_argument("the prompt is empty"))?;
        self.pick(out, s, u)
    }

    /// Feeds `token` at `pos` and returns the next one. After [`LlmProgram::prepare_decode`]
    /// on a program with device inputs, the inputs stay on the device (`u` is then the
    /// prepared one of this step).
    pub fn decode(&mut self, token: i64, pos: usize, s: &Sampling, u: f32) -> Result<i64> {
        let out = if self.device_inputs.is_some() {
            self.decode_on_device(token, pos)?
        } else {
            self.call(false, &[token], pos, s, u)?
        };
        self.pick(out, s, u)
    }
}
