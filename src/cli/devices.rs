//! `etch devices` and `etch ops`.

use etch::Result;

/// `etch devices`: the CPU and each CUDA device, or why there is none (exits 0 either way).
pub fn cmd_devices() -> Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("cpu: host, {cores} thread(s)");
    let status = etch::devices_status();
    #[cfg(feature = "cuda")]
    if let Some(cuda) = &status.cuda {
        for d in cuda.devices()? {
            println!(
                "cuda:{}: {}, {:.1} GiB total, {:.1} GiB free, compute capability {}.{}",
                d.index,
                d.name,
                d.total_bytes as f64 / (1u64 << 30) as f64,
                d.free_bytes as f64 / (1u64 << 30) as f64,
                d.compute_capability.0,
                d.compute_capability.1
            );
        }
        return Ok(());
    }
    println!(
        "cuda: none ({})",
        status
            .cuda_unavailable
            .as_deref()
            .unwrap_or("unknown reason")
    );
    Ok(())
}

/// `etch ops`: the portable CPU operators, one a line (the count on stderr).
pub fn cmd_ops() -> Result<()> {
    let k = etch::default_kernels();
    for n in k.names() {
        println!("{n}");
    }
    eprintln!("{} operators", k.len());
    Ok(())
}
