//! The `load_and_run` fuzz target: see `common::load_and_run`. Corpus: `fuzz/corpus/load_and_run`.
#![no_main]

mod common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| common::load_and_run(data));
