//! The `xnnpack` fuzz target: see `common::xnnpack_payload`. Corpus: `fuzz/corpus/xnnpack`.
#![no_main]

mod common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| common::xnnpack_payload(data));
