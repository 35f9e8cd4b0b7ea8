//! The `.pte` writer: read → write → read gives the same program, and rewritten programs run
//! with identical outputs. (`tools/check_writer.py` checks that ExecuTorch's own runtime
//! loads and runs the rewritten files too.)

mod common;

use common::{fixtures_dir, manifest, manifest_in};
use etch::{Module, Program, ProgramParts, WriteOptions};
use std::path::PathBuf;

fn all_programs() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = manifest().into_iter().map(|f| f.pte).collect();
    v.extend(
        manifest_in(&fixtures_dir().join("device"))
            .into_iter()
            .map(|f| f.pte),
    );
    v.push(fixtures_dir().join("misc/xnnpack_linear.pte"));
    v
}

#[test]
fn read_write_read_is_identity() {
    for path in all_programs() {
        let original = Program::from_file(&path).unwrap();
        let parts = ProgramParts::from_program(&original).unwrap();
        let bytes = parts.to_bytes(WriteOptions::default()).unwrap();
        let reread = Program::from_bytes(&bytes)
            .unwrap_or_else(|e| panic!("{}: rewritten file does not load: {e}", path.display()));
        let again = ProgramParts::from_program(&reread).unwrap();
        // Segment offsets are recomputed; everything else, and every segment's bytes, match.
        let mut a = parts.clone();
        let mut b = again.clone();
        a.program.segments = None;
        b.program.segments = None;
        assert_eq!(a, b, "{}", path.display());
        // Writing is deterministic: a second write gives the same bytes.
        assert_eq!(
            again.to_bytes(WriteOptions::default()).unwrap(),
            bytes,
            "{}",
            path.display()
        );
    }
}

#[test]
fn rewritten_programs_run_with_identical_outputs() {
    for fx in manifest() {
        let case = &fx.cases[0];
        let inputs = case.load_inputs();
        let bytes = {
            let p = Program::from_file(&fx.pte).unwrap();
            ProgramParts::from_program(&p)
                .unwrap()
                .to_bytes(WriteOptions::default())
                .unwrap()
        };
        let mut a = Module::from_file(&fx.pte).unwrap();
        let mut b = Module::from_bytes(&bytes).unwrap();
        if let Some(ptd) = &fx.ptd {
            a = a.with_data_file(ptd).unwrap();
            b = b.with_data_file(ptd).unwrap();
        }
        let oa = a.execute(&case.method, &inputs).unwrap();
        let ob = b.execute(&case.method, &inputs).unwrap();
        for (x, y) in oa.iter().zip(&ob) {
            match (x, y) {
                (etch::Value::Tensor(x), etch::Value::Tensor(y)) => {
                    assert_eq!(x.as_bytes().unwrap(), y.as_bytes().unwrap(), "{}", fx.name)
                }
                (x, y) => assert_eq!(format!("{x:?}"), format!("{y:?}"), "{}", fx.name),
            }
        }
    }
}
