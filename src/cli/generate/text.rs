//! Text for `etch generate`: the tokenizer (a Hugging Face `tokenizer.json` or a
//! tiktoken-format `tokenizer.model`), streaming
//! decoding, the checkpoint's chat template and its end-of-sequence ids.

use super::tiktoken::Tiktoken;
use etch::{Error, Result};
use serde_json::{Map, Value as Json};
use std::path::{Path, PathBuf};

/// The tokenizer: a Hugging Face `tokenizer.json`, or a tiktoken-format
/// `tokenizer.model` (Llama 3's).
pub enum Text {
    Hf(Box<tokenizers::Tokenizer>),
    Tiktoken(Box<Tiktoken>),
}

impl Text {
    /// Reads a `tokenizer.json`, or a tiktoken file (any other name whose first line is
    /// `base64 rank`).
    pub fn load(path: &Path) -> Result<Text> {
        let is_json = path.extension().is_some_and(|e| e == "json");
        if !is_json {
            let head = read_head(path)?;
            if Tiktoken::sniff(&head) {
                return Ok(Text::Tiktoken(Box::new(Tiktoken::load(path)?)));
            }
            return Err(Error::not_supported(format!(
                "{}: not a tokenizer.json or a tiktoken file (Llama 3's tokenizer.model); \
                 SentencePiece .model files are not supported yet: pass the checkpoint's \
                 tokenizer.json, or --prompt-ids",
                path.display()
            )));
        }
        let tok = tokenizers::Tokenizer::from_file(path).map_err(|e| {
            Error::invalid_argument(format!("cannot read tokenizer {}: {e}", path.display()))
        })?;
        Ok(Text::Hf(Box::new(tok)))
    }

    /// Token ids of `text`; `add_special`: the tokenizer's special tokens are added (the
    /// Hugging Face post-processor's BOS and the like; Llama 3's `<|begin_of_text|>` for a
    /// tiktoken file, as ExecuTorch's runner prepends it).
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<i64>> {
        let ids = match self {
            Text::Hf(tok) => tok
                .encode(text, add_special)
                .map_err(|e| Error::invalid_argument(format!("cannot tokenize the prompt: {e}")))?
                .get_ids()
                .to_vec(),
            Text::Tiktoken(t) => {
                let bos = t.special_id("<|begin_of_text|>").filter(|_| add_special);
                bos.into_iter().chain(t.encode(text)?).collect()
            }
        };
        Ok(ids.iter().map(|&i| i as i64).collect())
    }

    /// The text of `ids`, special tokens left out.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        match self {
            Text::Hf(tok) => tok
                .decode(ids, true)
                .map_err(|e| Error::invalid_argument(format!("cannot decode token ids: {e}"))),
            Text::Tiktoken(t) => t.decode(ids, true),
        }
    }

    /// `ids` as the tokenizer's ids (negative or huge ids cannot be tokens).
    pub fn ids(ids: &[i64]) -> Result<Vec<u32>> {
        ids.iter()
            .map(|&i| {
                u32::try_from(i)
                    .map_err(|_| Error::invalid_argument(format!("token id {i} out of range")))
            })
            .collect()
    }
}

/// The first bytes of a file (enough for its first line).
fn read_head(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut head = vec![0u8; 4096];
    let mut f = std::fs::File::open(path)
        .map_err(|e| Error::access_failed(format!("cannot read {}: {e}", path.display())))?;
    let n = f
        .read(&mut head)
        .map_err(|e| Error::access_failed(format!("cannot read {}: {e}", path.display())))?;
    head.truncate(n);
    Ok(head)
}

/// Incremental decoding: each new token yields the text it completes, so the pieces add up
/// to the one-shot decoding of all the tokens. A token that ends inside a multi-byte
/// character (byte-level tokenizers) yields nothing until a later one completes it.
///
/// Tokens are decoded in a window that starts one emission back (`prefix..read` was
/// printed; `read..` is new), so decoders that depend on the previous token (leading
/// spaces) see it.
pub struct TextStream<'a> {
    text: &'a Text,
    ids: Vec<u32>,
    prefix: usize,
    read: usize,
}

impl<'a> TextStream<'a> {
    pub fn new(text: &'a Text) -> TextStream<'a> {
        TextStream {
            text,
            ids: Vec::new(),
            prefix: 0,
            read: 0,
        }
    }

    /// The text the window holds beyond what was printed.
    fn pending(&self) -> Result<String> {
        let done = self.text.decode(&self.ids[self.prefix..self.read])?;
        let all = self.text.decode(&self.ids[self.prefix..])?;
        // Normally `all` extends `done`; should a decoder rewrite the printed part, only
        // what follows the common prefix is new.
        let mut n = done
            .bytes()
            .zip(all.bytes())
            .take_while(|(a, b)| a == b)
            .count();
        while !all.is_char_boundary(n) {
            n -= 1;
        }
        Ok(all[n..].to_string())
    }

    /// Adds a token; returns the newly completed text (maybe empty).
    pub fn push(&mut self, id: u32) -> Result<String> {
        self.ids.push(id);
        let new = self.pending()?;
        if new.is_empty() || new.ends_with('\u{FFFD}') {
            return Ok(String::new());
        }
        self.prefix = self.read;
        self.read = self.ids.len();
        Ok(new)
    }

    /// What is left at the end (an incomplete character decodes as U+FFFD, as in the
    /// one-shot decoding).
    pub fn finish(&mut self) -> Result<String> {
        let rest = self.pending()?;
        self.prefix = self.ids.len();
        self.read = self.ids.len();
        Ok(rest)
    }
}

/// Where the checkpoint's side files are looked for: the tokenizer's folder, then each
/// `--weights` folder (or a weights file's folder).
pub struct Checkpoint {
    dirs: Vec<PathBuf>,
}

fn folder(p: &Path) -> Option<PathBuf> {
    if p.is_dir() {
        Some(p.to_path_buf())
    } else {
        p.parent().map(Path::to_path_buf)
    }
}

impl Checkpoint {
    pub fn new(tokenizer: Option<&Path>, weights: &[PathBuf]) -> Checkpoint {
        let mut dirs: Vec<PathBuf> = Vec::new();
        for d in tokenizer
            .iter()
            .map(|t| folder(t))
            .chain(weights.iter().map(|w| folder(w)))
        {
            if let Some(d) = d.filter(|d| !dirs.contains(d)) {
                dirs.push(d);
            }
        }
        Checkpoint { dirs }
    }

    /// The first `name` in the folders.
    fn find(&self, name: &str) -> Option<PathBuf> {
        self.dirs.iter().map(|d| d.join(name)).find(|p| p.is_file())
    }

    /// `tokenizer.json` next to the weights, if there.
    pub fn default_tokenizer(weights: &[PathBuf]) -> Option<PathBuf> {
        let c = Checkpoint::new(None, weights);
        c.find("tokenizer.json").or_else(|| {
            c.find("tokenizer.model")
                .filter(|p| read_head(p).is_ok_and(|h| Tiktoken::sniff(&h)))
        })
    }

    fn read_json(path: &Path) -> Result<Json> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::access_failed(format!("cannot read {}: {e}", path.display())))?;
        serde_json::from_str(&text).map_err(|e| {
            Error::invalid_argument(format!("{} is not valid JSON: {e}", path.display()))
        })
    }

    /// `eos_token_id` (an int or a list) from `generation_config.json`, else `config.json`.
    pub fn eos_ids(&self) -> Result<Vec<i64>> {
        for name in ["generation_config.json", "config.json"] {
            let Some(path) = self.find(name) else {
                continue;
            };
            match &Checkpoint::read_json(&path)?["eos_token_id"] {
                Json::Number(n) => return Ok(n.as_i64().into_iter().collect()),
                Json::Array(a) => return Ok(a.iter().filter_map(Json::as_i64).collect()),
                _ => {}
            }
        }
        Ok(Vec::new())
    }

    /// The chat template and where it came from: `chat_template.jinja`, else
    /// `tokenizer_config.json`'s `chat_template` (a string, or a list of named templates:
    /// "default", else the first).
    pub fn chat_template(&self) -> Result<(String, PathBuf)> {
        if let Some(p) = self.find("chat_template.jinja") {
            let t = std::fs::read_to_string(&p)
                .map_err(|e| Error::access_failed(format!("cannot read {}: {e}", p.display())))?;
            return Ok((t, p));
        }
        if let Some(p) = self.find("tokenizer_config.json") {
            let template = match &Checkpoint::read_json(&p)?["chat_template"] {
                Json::String(s) => Some(s.clone()),
                Json::Array(list) => list
                    .iter()
                    .find(|t| t["name"] == "default")
                    .or(list.first())
                    .and_then(|t| t["template"].as_str().map(String::from)),
                _ => None,
            };
            if let Some(t) = template {
                return Ok((t, p));
            }
        }
        Err(Error::not_found(format!(
            "--chat: no chat template (chat_template.jinja, or chat_template in \
             tokenizer_config.json) in {}",
            self.dirs_text()
        )))
    }

    /// The special tokens `tokenizer_config.json` names (`bos_token`, `eos_token`, ...), as
    /// the template variables transformers passes.
    pub fn special_tokens(&self) -> Result<Map<String, Json>> {
        let mut out = Map::new();
        let Some(p) = self.find("tokenizer_config.json") else {
            return Ok(out);
        };
        let cfg = Checkpoint::read_json(&p)?;
        for key in ["bos_token", "eos_token", "unk_token", "pad_token"] {
            let v = match &cfg[key] {
                Json::String(s) => s.clone(),
                Json::Object(o) => match o.get("content") {
                    Some(Json::String(s)) => s.clone(),
                    _ => continue,
                },
                _ => continue,
            };
            out.insert(key.to_string(), Json::String(v));
        }
        Ok(out)
    }

    fn dirs_text(&self) -> String {
        if self.dirs.is_empty() {
            return "(no checkpoint folder: pass --tokenizer or --weights)".into();
        }
        self.dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Renders a chat template as transformers' `apply_chat_template` does for one user
/// message with `add_generation_prompt=True`: Jinja with trim_blocks and lstrip_blocks,
/// Python string methods, `raise_exception`, and the special tokens as variables.
pub fn render_chat(
    template: &str,
    source: &Path,
    prompt: &str,
    specials: &Map<String, Json>,
) -> Result<String> {
    use minijinja::{Environment, ErrorKind, syntax::SyntaxConfig};
    let fail = |e: minijinja::Error| {
        let mut msg = format!("chat template from {}: {e}", source.display());
        let mut cause = std::error::Error::source(&e);
        while let Some(c) = cause {
            msg.push_str(&format!(": {c}"));
            cause = c.source();
        }
        Error::invalid_argument(msg)
    };
    let mut env = Environment::new();
    env.set_syntax(
        SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(fail)?,
    );
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function(
        "raise_exception",
        |msg: String| -> std::result::Result<String, minijinja::Error> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
        },
    );
    let mut ctx = specials.clone();
    ctx.insert(
        "messages".into(),
        serde_json::json!([{ "role": "user", "content": prompt }]),
    );
    ctx.insert("add_generation_prompt".into(), Json::Bool(true));
    let tmpl = env.template_from_str(template).map_err(fail)?;
    tmpl.render(minijinja::Value::from(minijinja::value::Serde(&ctx)))
        .map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/tokenizer")
            .join(name)
    }

    #[test]
    fn streamed_pieces_add_up_to_the_one_shot_decoding() {
        // Random ids of the byte-level fixture: characters split across tokens, stray
        // continuation bytes, invalid bytes, special tokens (skipped).
        let text = Text::load(&fixture("tokenizer.json")).unwrap();
        let mut rng = etch::SplitMix64::new(11);
        for len in 0..300 {
            let ids: Vec<u32> = (0..len % 24)
                .map(|_| (rng.next_u64() % 256) as u32)
                .collect();
            let mut stream = TextStream::new(&text);
            let mut streamed = String::new();
            for &id in &ids {
                streamed.push_str(&stream.push(id).unwrap());
            }
            streamed.push_str(&stream.finish().unwrap());
            assert_eq!(streamed, text.decode(&ids).unwrap(), "{ids:?}");
        }
    }

    #[test]
    fn a_split_character_waits_for_its_last_byte() {
        let text = Text::load(&fixture("tokenizer.json")).unwrap();
        // "€" is E2 82 AC: three byte tokens.
        let ids = Text::ids(&text.encode("a€b", false).unwrap()).unwrap();
        assert_eq!(ids.len(), 5);
        let mut stream = TextStream::new(&text);
        let pieces: Vec<String> = ids.iter().map(|&i| stream.push(i).unwrap()).collect();
        assert_eq!(pieces, ["a", "", "", "€", "b"]);
        assert_eq!(stream.finish().unwrap(), "");
    }

    #[test]
    fn checkpoint_files_are_found_beside_the_tokenizer() {
        let ck = Checkpoint::new(Some(&fixture("tokenizer.json")), &[]);
        assert_eq!(ck.eos_ids().unwrap(), [255, 253]);
        let (template, source) = ck.chat_template().unwrap();
        assert!(source.ends_with("tokenizer_config.json"));
        let specials = ck.special_tokens().unwrap();
        assert_eq!(specials["eos_token"], "<|im_end|>");
        let out = render_chat(&template, &source, "hi", &specials).unwrap();
        assert_eq!(
            out,
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(
            Checkpoint::default_tokenizer(&[fixture("")]),
            Some(fixture("tokenizer.json"))
        );
    }

    #[test]
    fn tiktoken_files_are_found_loaded_and_stream() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiktoken");
        // Found as the weights folder's tokenizer.model when there is no tokenizer.json.
        let found = Checkpoint::default_tokenizer(std::slice::from_ref(&dir));
        assert_eq!(found, Some(dir.join("tokenizer.model")));
        let text = Text::load(&dir.join("tokenizer.model")).unwrap();
        let ids = text.encode("Hello, world!", true).unwrap();
        assert_eq!(ids[0], 416, "<|begin_of_text|> first");
        let ids = Text::ids(&ids).unwrap();
        assert_eq!(text.decode(&ids).unwrap(), "Hello, world!");
        // Streaming adds up to the one-shot decoding, multi-byte characters included.
        let ids = Text::ids(&text.encode("Café 日本 🙂 <|eot_id|>!", false).unwrap()).unwrap();
        let mut stream = TextStream::new(&text);
        let mut streamed = String::new();
        for &id in &ids {
            streamed.push_str(&stream.push(id).unwrap());
        }
        streamed.push_str(&stream.finish().unwrap());
        assert_eq!(streamed, text.decode(&ids).unwrap());
        assert_eq!(streamed, "Café 日本 🙂 !");
        // Another binary .model (SentencePiece) is a clear error, not a crash.
        let p = std::env::temp_dir().join(format!("etch-sp-{}.model", std::process::id()));
        std::fs::write(&p, [0x0a, 0x0b, 0xff, 0x00, 0x12]).unwrap();
        let e = Text::load(&p).err().unwrap();
        assert!(e.to_string().contains("SentencePiece"), "{e}");
        let _ = std::fs::remove_file(&p);
    }
}
