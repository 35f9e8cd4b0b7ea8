//! Tiktoken-format tokenizers: the `tokenizer.model` that Llama 3 checkpoints (and
//! ExecuTorch's Llama 3 exports) ship, one `base64(bytes) rank` line per token. Encoding is
//! tiktoken's: special tokens found first, the text between them split by Llama 3's
//! pre-tokenizer pattern (cl100k's), each piece byte-pair merged by rank (lowest rank
//! first, leftmost on ties). Llama 3's 256 special tokens follow the base vocabulary, as
//! in ExecuTorch's runner. Written here rather than taken from a crate: the one maintained
//! Rust port (tiktoken-rs) asserts (panics) on a malformed file and embeds OpenAI's
//! vocabularies.

use etch::{Error, Result};
use std::collections::HashMap;
use std::path::Path;

/// Llama 3's pre-tokenizer pattern (tiktoken's cl100k_base).
const PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Llama 3's named special tokens, in id order after the base vocabulary; reserved ones
/// fill the rest of the 256.
const SPECIAL: [&str; 12] = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",
    "<|step_id|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
    "<|image|>",
];
const NUM_SPECIAL: usize = 256;

/// A tiktoken BPE with Llama 3's special tokens.
pub struct Tiktoken {
    ranks: HashMap<Vec<u8>, u32>,
    /// Bytes of each base token, by id.
    tokens: Vec<Vec<u8>>,
    special: Vec<String>,
    special_ids: HashMap<String, u32>,
    split: fancy_regex::Regex,
    special_re: fancy_regex::Regex,
}

impl Tiktoken {
    /// True when `bytes` look like a tiktoken file (a first line `base64 rank`).
    pub fn sniff(bytes: &[u8]) -> bool {
        let line = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
        let Ok(line) = std::str::from_utf8(line) else {
            return false;
        };
        let mut parts = line.split(' ');
        matches!(
            (parts.next(), parts.next(), parts.next()),
            (Some(t), Some(r), None) if base64::decode(t).is_ok() && r.trim().parse::<u32>().is_ok()
        )
    }

    /// Reads a tiktoken file. Ranks must be 0..n, each once, with distinct byte strings.
    pub fn load(path: &Path) -> Result<Tiktoken> {
        let what = path.display();
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::access_failed(format!("cannot read {what}: {e}")))?;
        let bad = |n: usize, why: &str| {
            Error::invalid_argument(format!("{what}, line {n}: {why} (expected `base64 rank`)"))
        };
        let mut ranks = HashMap::new();
        let mut tokens: Vec<Option<Vec<u8>>> = Vec::new();
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let (tok, rank) = line
                .trim()
                .split_once(' ')
                .ok_or_else(|| bad(i + 1, "no rank"))?;
            let bytes = base64::decode(tok).map_err(|_| bad(i + 1, "bad base64"))?;
            let rank: u32 = rank.parse().map_err(|_| bad(i + 1, "bad rank"))?;
            let r = rank as usize;
            if r >= 1 << 24 {
                return Err(bad(i + 1, "rank too large"));
            }
            if tokens.len() <= r {
                tokens.resize(r + 1, None);
            }
            if tokens[r].is_some() || ranks.insert(bytes.clone(), rank).is_some() {
                return Err(bad(i + 1, "a rank or a token given twice"));
            }
            tokens[r] = Some(bytes);
        }
        let tokens = tokens
            .into_iter()
            .enumerate()
            .map(|(r, t)| {
                t.ok_or_else(|| Error::invalid_argument(format!("{what}: no token of rank {r}")))
            })
            .collect::<Result<Vec<_>>>()?;
        if tokens.is_empty() {
            return Err(Error::invalid_argument(format!("{what}: no tokens")));
        }
        Self::new(ranks, tokens)
    }

    fn new(ranks: HashMap<Vec<u8>, u32>, tokens: Vec<Vec<u8>>) -> Result<Tiktoken> {
        let mut special: Vec<String> = SPECIAL.iter().map(|s| s.to_string()).collect();
        let reserved = (2..).map(|i| format!("<|reserved_special_token_{i}|>"));
        special.extend(reserved.take(NUM_SPECIAL - SPECIAL.len()));
        let n = tokens.len() as u32;
        let special_ids = special
            .iter()
            .enumerate()
            .map(|(i, s)| (s.clone(), n + i as u32))
            .collect();
        let alternatives: Vec<String> = special
            .iter()
            .map(|s| fancy_regex::escape(s).into_owned())
            .collect();
        let re = |p: &str| {
            fancy_regex::Regex::new(p)
                .map_err(|e| Error::internal(format!("tokenizer pattern: {e}")))
        };
        Ok(Tiktoken {
            ranks,
            tokens,
            special_re: re(&alternatives.join("|"))?,
            special,
            special_ids,
            split: re(PATTERN)?,
        })
    }

    /// Ids of all tokens: the base vocabulary and the special tokens.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len() + self.special.len()
    }

    /// The id of a special token.
    pub fn special_id(&self, name: &str) -> Option<u32> {
        self.special_ids.get(name).copied()
    }

    /// Token ids of `text`, special tokens in it recognised (tiktoken's
    /// `allowed_special="all"`, as ExecuTorch's runner encodes prompts).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        let mut at = 0;
        for m in self.special_re.find_iter(text) {
            let m = m.map_err(|e| Error::internal(format!("tokenizer: {e}")))?;
            self.encode_ordinary(&text[at..m.start()], &mut out)?;
            out.push(self.special_ids[m.as_str()]);
            at = m.end();
        }
        self.encode_ordinary(&text[at..], &mut out)?;
        Ok(out)
    }

    fn encode_ordinary(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        for piece in self.split.find_iter(text) {
            let piece = piece.map_err(|e| Error::internal(format!("tokenizer: {e}")))?;
            let bytes = piece.as_str().as_bytes();
            match self.ranks.get(bytes) {
                Some(&r) => out.push(r),
                None => self.byte_pair_encode(bytes, out)?,
            }
        }
        Ok(())
    }

    fn rank(&self, b: &[u8]) -> u32 {
        self.ranks.get(b).copied().unwrap_or(u32::MAX)
    }

    /// tiktoken's merge: boundaries with the rank of the pair they start; merge the lowest
    /// (leftmost on ties) until no adjacent pair is a token.
    fn byte_pair_encode(&self, piece: &[u8], out: &mut Vec<u32>) -> Result<()> {
        if piece.is_empty() {
            return Ok(());
        }
        let mut parts: Vec<(usize, u32)> = (0..piece.len().saturating_sub(1))
            .map(|i| (i, self.rank(&piece[i..i + 2])))
            .collect();
        parts.push((piece.len() - 1, u32::MAX));
        parts.push((piece.len(), u32::MAX));
        let rank_at = |parts: &[(usize, u32)], i: usize| {
            if i + 3 < parts.len() {
                self.rank(&piece[parts[i].0..parts[i + 3].0])
            } else {
                u32::MAX
            }
        };
        loop {
            let (mut best, mut at) = (u32::MAX, 0);
            for (i, &(_, r)) in parts[..parts.len() - 1].iter().enumerate() {
                if r < best {
                    (best, at) = (r, i);
                }
            }
            if best == u32::MAX {
                break;
            }
            if at > 0 {
                parts[at - 1].1 = rank_at(&parts, at - 1);
            }
            parts[at].1 = rank_at(&parts, at);
            parts.remove(at + 1);
        }
        for w in parts.windows(2) {
            let b = &piece[w[0].0..w[1].0];
            let r = self.ranks.get(b).ok_or_else(|| {
                Error::invalid_argument(format!(
                    "the tokenizer has no token for the bytes {b:?} (a tiktoken file lists every single byte)"
                ))
            })?;
            out.push(*r);
        }
        Ok(())
    }

    /// The bytes of `ids` (special tokens left out when `skip_special`), decoded as UTF-8
    /// with invalid sequences replaced (an unfinished character ends in U+FFFD).
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        let mut bytes = Vec::new();
        for &id in ids {
            let i = id as usize;
            if let Some(t) = self.tokens.get(i) {
                bytes.extend_from_slice(t);
            } else if let Some(s) = self.special.get(i - self.tokens.len()) {
                if !skip_special {
                    bytes.extend_from_slice(s.as_bytes());
                }
            } else {
                return Err(Error::invalid_argument(format!(
                    "token id {id} is outside the tokenizer's {} ids",
                    self.vocab_size()
                )));
            }
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value as Json;

    fn dir() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiktoken")
    }

    #[test]
    fn ids_and_text_equal_tiktoken() {
        let t = Tiktoken::load(&dir().join("tokenizer.model")).unwrap();
        let want: Json =
            serde_json::from_str(&std::fs::read_to_string(dir().join("expected.json")).unwrap())
                .unwrap();
        assert_eq!(
            t.vocab_size(),
            want["vocab_size"].as_u64().unwrap() as usize
        );
        assert_eq!(
            t.special_id("<|begin_of_text|>").map(u64::from),
            want["bos"].as_u64()
        );
        assert_eq!(
            t.special_id("<|end_of_text|>").map(u64::from),
            want["eos"].as_u64()
        );
        for c in want["cases"].as_array().unwrap() {
            let text = c["text"].as_str().unwrap();
            let ids: Vec<u32> = serde_json::from_value(c["ids"].clone()).unwrap();
            assert_eq!(t.encode(text).unwrap(), ids, "{text:?}");
            assert_eq!(
                t.decode(&ids, false).unwrap(),
                c["decoded"].as_str().unwrap()
            );
        }
    }

    #[test]
    fn malformed_files_are_errors() {
        let p = std::env::temp_dir().join(format!("etch-tiktoken-{}", std::process::id()));
        for (body, why) in [
            ("QQ== 0\nQQ== 1\n", "twice"),
            ("QQ== 0\nQg== 2\n", "no token of rank 1"),
            ("Q!Q 0\n", "bad base64"),
            ("QQ==\n", "no rank"),
            ("", "no tokens"),
        ] {
            std::fs::write(&p, body).unwrap();
            let e = Tiktoken::load(&p).err().unwrap();
            assert!(e.to_string().contains(why), "{body:?}: {e}");
        }
        // A file without every byte: an error for text that needs a missing byte.
        std::fs::write(&p, "QQ== 0\n").unwrap();
        let t = Tiktoken::load(&p).unwrap();
        assert_eq!(t.encode("A").unwrap(), [0]);
        assert!(t.encode("AB").is_err());
        assert!(t.decode(&[100_000], false).is_err());
        let _ = std::fs::remove_file(&p);
    }
}
