//! Results do not depend on the thread count: every fixture (XNNPACK-delegated ones too), and a program whose tensors
//! are large enough for the kernels to split their work (`misc/threads.pte`: convolutions,
//! depthwise convolution, pooling, norms, matrix products, softmax, elementwise ops), give
//! bit-identical outputs with 1 thread and with several. One test function, since the
//! thread count is process-wide.

mod common;

use common::{fixtures_dir, manifest, manifest_in};
use etch::{Module, Tensor, Value};

/// The outputs of every case, as bytes, run with `threads` threads.
fn outputs(threads: usize) -> Vec<(String, Vec<u8>)> {
    etch::set_num_threads(threads);
    assert_eq!(etch::num_threads(), threads);
    let mut all = Vec::new();
    let llama = manifest_in(&fixtures_dir().join("llama_ops"));
    let xnnpack = manifest_in(&fixtures_dir().join("xnnpack"));
    for fx in manifest().into_iter().chain(llama).chain(xnnpack) {
        let mut module = Module::from_file(&fx.pte).unwrap();
        if let Some(ptd) = &fx.ptd {
            module = module.with_data_file(ptd).unwrap();
        }
        for (ci, case) in fx.cases.iter().enumerate() {
            let inputs = case.load_inputs();
            let outs = module.execute(&case.method, &inputs).unwrap();
            for (oi, o) in outs.iter().enumerate() {
                all.push((format!("{} case {ci} output {oi}", fx.name), bytes(o)));
            }
        }
    }
    // A larger program, with inputs that are not all equal.
    let mut module = Module::from_file(fixtures_dir().join("misc/threads.pte")).unwrap();
    let mut seed = 1u32;
    let x: Vec<f32> = (0..8 * 96 * 96)
        .map(|_| {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 8) as f32 / (1u32 << 24) as f32 * 4.0 - 2.0
        })
        .collect();
    let x = Tensor::from_slice(&x, &[1, 8, 96, 96]).unwrap();
    for run in 0..2 {
        let outs = module.forward(&[Value::Tensor(x.clone())]).unwrap();
        all.push((format!("threads.pte run {run}"), bytes(&outs[0])));
    }
    all
}

fn bytes(v: &Value) -> Vec<u8> {
    match v {
        Value::Tensor(t) => t.as_bytes().unwrap().to_vec(),
        other => format!("{other:?}").into_bytes(),
    }
}

#[test]
fn outputs_do_not_depend_on_the_thread_count() {
    let one = outputs(1);
    for threads in [2, 3, 4, 7] {
        let many = outputs(threads);
        assert_eq!(one.len(), many.len());
        for ((name, a), (_, b)) in one.iter().zip(&many) {
            assert!(a == b, "{name}: differs with {threads} threads");
        }
    }
    etch::set_num_threads(0);
}
