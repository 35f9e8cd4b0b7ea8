//! The `ptd` fuzz target: see `common::ptd`. Corpus: `fuzz/corpus/ptd`.
#![no_main]

mod common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| common::ptd(data));
