//! Weight loading throughput: copies the external constants of a program from a safetensors
//! checkpoint into device memory the way loading its methods does (each distinct constant
//! once, streamed from the files through the device's staging pipeline), and prints GB/s
//! and the peak host RSS. Without the rest of loading (no kernels, no delegates), it shows
//! what the copy itself costs.
//!
//! ```text
//! cargo run --release --example load_bench -- MODEL.pte CKPT [--convert-dtype]
//!     [--host-build] [--simulate]
//! ```
//!
//! `--host-build` builds each tensor in host memory first (stacked experts, converted
//! dtypes; the checkpoint keeps them) and copies that, as etch did before streaming;
//! `--simulate` uses the simulated device instead of `cuda:0`. `ETCH_COPY_THREADS` sets the
//! threads that fill the staging buffers.

use etch::{
    DeviceMemoryBuffer, DeviceRegistry, DeviceType, Error, Module, NamedDataMap, Result,
    Safetensors, TensorLayout, WeightOptions,
};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

struct Args {
    model: String,
    ckpt: String,
    convert_dtype: bool,
    host_build: bool,
    simulate: bool,
}

fn args() -> Result<Args> {
    let mut pos = Vec::new();
    let mut a = Args {
        model: String::new(),
        ckpt: String::new(),
        convert_dtype: false,
        host_build: false,
        simulate: false,
    };
    for x in std::env::args().skip(1) {
        match x.as_str() {
            "--convert-dtype" => a.convert_dtype = true,
            "--host-build" => a.host_build = true,
            "--simulate" => a.simulate = true,
            s if s.starts_with("--") => {
                return Err(Error::invalid_argument(format!("unknown option {s}")));
            }
            _ => pos.push(x),
        }
    }
    let [model, ckpt] = <[String; 2]>::try_from(pos).map_err(|_| {
        Error::invalid_argument(
            "usage: load_bench MODEL.pte CKPT [--convert-dtype] [--host-build] [--simulate]",
        )
    })?;
    a.model = model;
    a.ckpt = ckpt;
    Ok(a)
}

/// The layouts of the program's external constants, each (name, dtype, shape) once.
fn constants(model: &str) -> Result<Vec<(String, TensorLayout)>> {
    let module = Module::from_file(model)?;
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for m in module.method_names() {
        for c in module.method_meta(m)?.external_constants() {
            if seen.insert((c.name.clone(), c.dtype, c.sizes.clone())) {
                let layout = TensorLayout {
                    dtype: c.dtype,
                    sizes: c.sizes.iter().map(|&s| s as i64).collect(),
                    dim_order: (0..c.sizes.len() as u8).collect(),
                };
                out.push((c.name.clone(), layout));
            }
        }
    }
    Ok(out)
}

fn registry(simulate: bool) -> Result<Arc<DeviceRegistry>> {
    if simulate {
        let r = DeviceRegistry::new();
        r.register(Arc::new(etch::SimulatedAllocator::new(1)))?;
        return Ok(Arc::new(r));
    }
    if let Some(why) = &etch::devices_status().cuda_unavailable {
        return Err(Error::not_found(format!(
            "no CUDA device ({why}); try --simulate"
        )));
    }
    Ok(etch::default_devices())
}

fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: f64 = s
        .lines()
        .find(|l| l.starts_with("VmHWM"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

fn main() -> Result<()> {
    let a = args()?;
    let consts = constants(&a.model)?;
    let registry = registry(a.simulate)?;
    let t_open = Instant::now();
    let opts = WeightOptions {
        convert_dtype: a.convert_dtype,
    };
    let ck = Safetensors::open_with(&a.ckpt, opts)?;
    let open_s = t_open.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut bufs = Vec::with_capacity(consts.len());
    let mut bytes = 0usize;
    for (name, layout) in &consts {
        let missing = || Error::not_found(format!("'{name}' is not in the checkpoint"));
        if a.host_build {
            let blob = ck.get_tensor(name, layout)?.ok_or_else(missing)?;
            let buf =
                DeviceMemoryBuffer::create(&registry, blob.data.len(), DeviceType::Cuda, 0, 256)?;
            let alloc = buf
                .allocator()
                .ok_or_else(|| Error::internal("no allocator"))?;
            alloc.copy_host_to_device(buf.data(), blob.data, 0)?;
            bytes += blob.data.len();
            bufs.push(buf);
        } else {
            let src = ck.get_tensor_source(name, layout)?.ok_or_else(missing)?;
            let n = src.bytes.len();
            let buf = DeviceMemoryBuffer::create(&registry, n, DeviceType::Cuda, 0, 256)?;
            let alloc = buf
                .allocator()
                .ok_or_else(|| Error::internal("no allocator"))?;
            alloc.copy_host_to_device_from(buf.data(), &*src.bytes, 0)?;
            bytes += n;
            bufs.push(buf);
        }
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "{} tensors, {:.3} GB in {secs:.3} s: {:.2} GB/s ({}; checkpoint opened in {open_s:.3} s); peak host RSS {}",
        consts.len(),
        bytes as f64 / 1e9,
        bytes as f64 / 1e9 / secs.max(1e-9),
        if a.host_build {
            "built in host memory, then copied"
        } else {
            "streamed from the files"
        },
        peak_rss_mib().map_or("?".into(), |m| format!("{m:.1} MiB")),
    );
    Ok(())
}
