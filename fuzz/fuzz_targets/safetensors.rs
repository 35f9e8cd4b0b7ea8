//! The `safetensors` fuzz target: see `common::safetensors`. Corpus: `fuzz/corpus/safetensors`.
#![no_main]

mod common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| common::safetensors(data));
