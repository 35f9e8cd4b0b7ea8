//! The `lower` fuzz target: see `common::lower_and_run`. Corpus: `fuzz/corpus/lower`.
#![no_main]

mod common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| common::lower_and_run(data));
