//! How the tensor names of a program map to the names in a Hugging Face checkpoint.
//!
//! A program exported from a transformers model names its external constants by the
//! model's `state_dict` keys (`model.layers.0.mlp.experts.gate_up_proj`, `lm_head.weight`).
//! Checkpoints on disk differ in three ways, all read without a conversion step:
//! - multimodal checkpoints keep the text model under `model.language_model.` (a program
//!   name `model.X` is looked up as `model.language_model.X` when `model.X` is absent);
//! - `save_pretrained` writes mixture-of-experts weights per expert
//!   (`P.experts.E.gate_proj.weight`, `P.experts.E.up_proj.weight`,
//!   `P.experts.E.down_proj.weight`) where the model holds them stacked (`P.experts.gate_up_proj`
//!   `[E, 2I, H]`: each expert's gate rows, then its up rows; `P.experts.down_proj` `[E, H, I]`);
//! - with tied embeddings (`"tie_word_embeddings": true` in `config.json`, top-level or in
//!   `text_config`) `lm_head.weight` is not saved: the embedding is used.

use etch_core::{Error, Result};
use std::path::Path;

/// The checkpoint names tried for the program's tensor `key`, in order.
pub(crate) fn candidates(key: &str, tied_embeddings: bool) -> Vec<String> {
    let mut v = vec![key.to_string()];
    if let Some(rest) = key.strip_prefix("model.")
        && !rest.starts_with("language_model.")
    {
        v.push(format!("model.language_model.{rest}"));
    }
    if tied_embeddings && key == "lm_head.weight" {
        v.extend(candidates("model.embed_tokens.weight", false));
    }
    v
}

/// Which stacked expert tensor per-expert weights make up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StackKind {
    /// `experts.gate_up_proj` `[E, 2I, H]`: per expert, `gate_proj.weight` `[I, H]` then
    /// `up_proj.weight` `[I, H]`.
    GateUp,
    /// `experts.down_proj` `[E, H, I]`: per expert, `down_proj.weight` `[H, I]`.
    Down,
}

impl StackKind {
    /// The per-expert tensors of expert `e` under `prefix` (`...mlp.experts`), in stacking
    /// order along dimension 1 (`e` is a number, or a placeholder for messages).
    pub(crate) fn parts(self, prefix: &str, e: impl std::fmt::Display) -> Vec<String> {
        let names: &[&str] = match self {
            StackKind::GateUp => &["gate_proj", "up_proj"],
            StackKind::Down => &["down_proj"],
        };
        names
            .iter()
            .map(|p| format!("{prefix}.{e}.{p}.weight"))
            .collect()
    }
}

/// A stacked expert name `P.experts.gate_up_proj` / `P.experts.down_proj`: the prefix
/// `P.experts` and the kind.
pub(crate) fn stacked_name(name: &str) -> Option<(&str, StackKind)> {
    let (prefix, kind) = match name.strip_suffix(".gate_up_proj") {
        Some(p) => (p, StackKind::GateUp),
        None => (name.strip_suffix(".down_proj")?, StackKind::Down),
    };
    (prefix == "experts" || prefix.ends_with(".experts")).then_some((prefix, kind))
}

/// A per-expert checkpoint name `P.experts.E.{gate,up,down}_proj.weight`, split into the
/// stacked name it belongs to (`P.experts.gate_up_proj` or `P.experts.down_proj`), the
/// prefix `P.experts`, the kind and the expert index `E`.
pub(crate) fn expert_part(name: &str) -> Option<(String, &str, StackKind, usize)> {
    let rest = name.strip_suffix(".weight")?;
    let (rest, proj) = rest.rsplit_once('.')?;
    let (prefix, index) = rest.rsplit_once('.')?;
    if !(prefix == "experts" || prefix.ends_with(".experts"))
        || index.is_empty()
        || !index.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let e: usize = index.parse().ok()?;
    let (fused, kind) = match proj {
        "gate_proj" | "up_proj" => ("gate_up_proj", StackKind::GateUp),
        "down_proj" => ("down_proj", StackKind::Down),
        _ => return None,
    };
    Some((format!("{prefix}.{fused}"), prefix, kind, e))
}

/// Whether `dir/config.json` ties the output projection to the embedding
/// (`tie_word_embeddings` true at the top level or in `text_config`). No file: false.
pub(crate) fn tied_embeddings(dir: &Path) -> Result<bool> {
    let path = dir.join("config.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => {
            return Err(Error::access_failed(format!(
                "cannot read '{}': {e}",
                path.display()
            )));
        }
    };
    let config: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        Error::invalid_argument(format!("'{}' is not valid JSON: {e}", path.display()))
    })?;
    let tie = |v: &serde_json::Value| v.get("tie_word_embeddings") == Some(&true.into());
    Ok(tie(&config) || config.get("text_config").is_some_and(tie))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_add_the_multimodal_prefix_and_the_tied_embedding() {
        assert_eq!(
            candidates("model.norm.weight", false),
            ["model.norm.weight", "model.language_model.norm.weight"]
        );
        assert_eq!(candidates("lm_head.weight", false), ["lm_head.weight"]);
        assert_eq!(
            candidates("lm_head.weight", true),
            [
                "lm_head.weight",
                "model.embed_tokens.weight",
                "model.language_model.embed_tokens.weight"
            ]
        );
        assert_eq!(
            candidates("model.language_model.norm.weight", false),
            ["model.language_model.norm.weight"]
        );
    }

    #[test]
    fn expert_parts_are_recognised() {
        let (fused, prefix, kind, e) =
            expert_part("model.layers.3.mlp.experts.17.up_proj.weight").unwrap();
        assert_eq!(fused, "model.layers.3.mlp.experts.gate_up_proj");
        assert_eq!(prefix, "model.layers.3.mlp.experts");
        assert_eq!((kind, e), (StackKind::GateUp, 17));
        let (fused, _, kind, e) = expert_part("experts.0.down_proj.weight").unwrap();
        assert_eq!(
            (fused.as_str(), kind, e),
            ("experts.down_proj", StackKind::Down, 0)
        );
        for other in [
            "model.layers.0.mlp.shared_expert.up_proj.weight",
            "model.layers.0.mlp.experts.+1.up_proj.weight",
            "model.layers.0.mlp.experts.1.up_proj.bias",
            "model.layers.0.mlp.experts.gate_up_proj",
            "model.layers.0.mlp.myexperts.1.up_proj.weight",
        ] {
            assert!(expert_part(other).is_none(), "{other}");
        }
        assert_eq!(
            stacked_name("m.experts.down_proj"),
            Some(("m.experts", StackKind::Down))
        );
        assert_eq!(stacked_name("m.shared_expert.down_proj"), None);
        assert_eq!(
            StackKind::GateUp.parts("p.experts", 2),
            ["p.experts.2.gate_proj.weight", "p.experts.2.up_proj.weight"]
        );
    }
}
