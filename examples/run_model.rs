//! Loads the bundled example model, runs it on a fixed input and prints the outputs.
//!
//! `cargo run --release --example run_model [MODEL.pte]`

use etch::{Module, Tag, Tensor, Value};

fn main() -> etch::Result<()> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/examples/models/mlp.pte").into());
    let mut module = Module::from_file(&path)?;
    let meta = module.method_meta("forward")?;

    // Build one input per declared tensor input: a ramp in [-1, 1).
    let mut inputs = Vec::new();
    for info in meta.inputs() {
        match (&info.tag, &info.tensor) {
            (Tag::Tensor, Some(t)) if t.dtype == etch::ScalarType::Float => {
                let n: usize = t.sizes.iter().product();
                let data: Vec<f32> = (0..n).map(|i| (i as f32 / n as f32) * 2.0 - 1.0).collect();
                inputs.push(Value::Tensor(Tensor::from_slice(&data, &t.sizes)?));
            }
            _ => {
                return Err(etch::Error::not_supported(
                    "this example only feeds float32 tensor inputs",
                ));
            }
        }
    }

    let outputs = module.forward(&inputs)?;
    for (i, out) in outputs.iter().enumerate() {
        let t = out.as_tensor()?;
        println!("output {i}: {} {:?}", t.dtype(), t.sizes());
        println!("  {:?}", t.to_f64_vec()?);
    }
    Ok(())
}
