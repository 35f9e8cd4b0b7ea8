//! Host↔device copy throughput on a real GPU: through etch's `CudaAllocator`, through the
//! `et_copy` kernels, and through a raw cudarc memcpy, for pageable and pinned host memory,
//! from 4 KiB to 1 GiB; plus the per-copy overhead for a 4-byte tensor.
//!
//! `cargo run --release --example copy_bench` (prints a Markdown table; exits 0 with a
//! message when there is no CUDA device).

#[cfg(feature = "cuda")]
fn main() -> etch::Result<()> {
    bench::run()
}

#[cfg(not(feature = "cuda"))]
fn main() {
    println!("built without the `cuda` feature");
}

#[cfg(feature = "cuda")]
mod bench {
    use cudarc::driver::result;
    use etch::{
        Device, DeviceAllocator, Dynamism, EValue, KernelContext, Result, ScalarType, TensorImpl,
    };
    use etch_devices::cuda::DEFAULT_STAGING_THRESHOLD;
    use std::time::Instant;

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    }

    /// Seconds per call, median over `reps` after one warm-up.
    fn time(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
        f()?;
        let mut v = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t = Instant::now();
            f()?;
            v.push(t.elapsed().as_secs_f64());
        }
        Ok(median(v))
    }

    fn gbps(bytes: usize, secs: f64) -> String {
        format!("{:.1}", bytes as f64 / secs / 1e9)
    }

    pub fn run() -> Result<()> {
        let status = etch::devices_status();
        let Some(cuda) = status.cuda.clone() else {
            println!(
                "no CUDA device: {}",
                status.cuda_unavailable.as_deref().unwrap_or("?")
            );
            return Ok(());
        };
        let registry = etch::default_devices();
        let kernels = etch::default_kernels();
        let h2d_kernel = kernels
            .get("et_copy::_h2d_copy.out")
            .ok_or_else(|| etch::Error::not_found("et_copy kernel"))?;
        let info = cuda.devices()?;
        println!("device: {} (cuda:0), {}", info[0].name, chrono_free_date());
        println!();
        println!(
            "| size | H2D pageable, direct (etch) | H2D pageable via pinned staging (etch) | H2D pageable (etch default) | H2D pinned (etch) | H2D pinned (et_copy op) | H2D pinned (raw cudarc) | D2H pageable (etch) | D2H pinned (etch) | D2H pinned (raw cudarc) |"
        );
        println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
        let sizes = [
            4usize << 10,
            64 << 10,
            1 << 20,
            16 << 20,
            64 << 20,
            256 << 20,
            1 << 30,
        ];
        for &n in &sizes {
            let reps = if n >= 256 << 20 {
                5
            } else if n >= 16 << 20 {
                10
            } else {
                50
            };
            let dev = cuda.allocate(n, 0, 256)?;
            let mut pageable = vec![1u8; n];
            let pinned = cuda.alloc_pinned(n)?;
            // SAFETY: a fresh pinned allocation of `n` bytes, freed below.
            let pinned_s = unsafe { std::slice::from_raw_parts_mut(pinned, n) };
            pinned_s.fill(2);
            // Direct (staging off), always staged, and the default (staged from the
            // threshold): the first two columns show where staging starts to win.
            cuda.set_staging_threshold(usize::MAX);
            let h2d_direct = time(reps, || cuda.copy_host_to_device(dev, &pageable, 0))?;
            cuda.set_staging_threshold(DEFAULT_STAGING_THRESHOLD);
            let h2d_staged = time(reps, || cuda.copy_host_to_device_staged(dev, &pageable, 0))?;
            let h2d_pageable = time(reps, || cuda.copy_host_to_device(dev, &pageable, 0))?;
            let h2d_pinned = time(reps, || cuda.copy_host_to_device(dev, pinned_s, 0))?;
            let raw_h2d = time(reps, || {
                // SAFETY: `dev` holds `n` bytes; the context is current after the calls above.
                unsafe { result::memcpy_htod_sync(dev as usize as u64, &*pinned_s) }
                    .map_err(|e| etch::Error::internal(e.to_string()))
            })?;
            // et_copy: a host tensor (pinned) into a device tensor.
            let numel = n / 4;
            let src = TensorImpl::new(
                ScalarType::Float,
                &[numel],
                None,
                Dynamism::Static,
                Device::CPU,
                pinned,
                n,
            )?;
            let dst = TensorImpl::new(
                ScalarType::Float,
                &[numel],
                None,
                Dynamism::Static,
                Device::cuda(0),
                dev,
                n,
            )?;
            let mut values = vec![
                EValue::Tensor(src),
                EValue::Tensor(dst),
                EValue::Tensor(dst),
            ];
            let args = [0u32, 1, 2];
            let op = time(reps, || {
                // SAFETY: both tensors point at live memory of `n` bytes.
                let mut ctx =
                    unsafe { KernelContext::new(&mut values, &args, "et_copy::_h2d_copy.out") }
                        .with_devices(&registry, false);
                h2d_kernel(&mut ctx)
            })?;
            let d2h_pageable = time(reps, || cuda.copy_device_to_host(&mut pageable, dev, 0))?;
            let d2h_pinned = time(reps, || cuda.copy_device_to_host(pinned_s, dev, 0))?;
            let raw_d2h = time(reps, || {
                // SAFETY: as above.
                unsafe { result::memcpy_dtoh_sync(&mut *pinned_s, dev as usize as u64) }
                    .map_err(|e| etch::Error::internal(e.to_string()))
            })?;
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                human(n),
                gbps(n, h2d_direct),
                gbps(n, h2d_staged),
                gbps(n, h2d_pageable),
                gbps(n, h2d_pinned),
                gbps(n, op),
                gbps(n, raw_h2d),
                gbps(n, d2h_pageable),
                gbps(n, d2h_pinned),
                gbps(n, raw_d2h)
            );
            cuda.deallocate(dev, 0)?;
            cuda.free_pinned(pinned)?;
        }
        println!();
        println!(
            "(GB/s, median of repeated copies; staging from {} MiB with {} threads)",
            DEFAULT_STAGING_THRESHOLD >> 20,
            etch_devices::cuda::copy_threads()
        );
        if cuda.num_devices() >= 2 {
            println!();
            println!("| size | cuda:0 → cuda:1 (etch) | cuda:1 → cuda:0 (etch) |");
            println!("| --- | --- | --- |");
            for &n in &[1usize << 20, 16 << 20, 256 << 20, 1 << 30] {
                let reps = if n >= 256 << 20 { 5 } else { 20 };
                let a = cuda.allocate(n, 0, 256)?;
                let b = cuda.allocate(n, 1, 256)?;
                let fwd = time(reps, || cuda.copy_device_to_device(b, 1, a, 0, n))?;
                let back = time(reps, || cuda.copy_device_to_device(a, 0, b, 1, n))?;
                println!("| {} | {} | {} |", human(n), gbps(n, fwd), gbps(n, back));
                cuda.deallocate(a, 0)?;
                cuda.deallocate(b, 1)?;
            }
            println!();
            println!(
                "(GB/s, median; peer access cuda:0→cuda:1 {}, cuda:1→cuda:0 {})",
                cuda.peer_access(0, 1),
                cuda.peer_access(1, 0)
            );
        }
        // Per-copy overhead of a 4-byte tensor.
        let dev = cuda.allocate(4, 0, 8)?;
        let x = [0u8; 4];
        let mut y = [0u8; 4];
        let h = time(2000, || cuda.copy_host_to_device(dev, &x, 0))?;
        let d = time(2000, || cuda.copy_device_to_host(&mut y, dev, 0))?;
        let raw = time(2000, || {
            // SAFETY: `dev` holds 4 bytes.
            unsafe { result::memcpy_htod_sync(dev as usize as u64, &x[..]) }
                .map_err(|e| etch::Error::internal(e.to_string()))
        })?;
        cuda.deallocate(dev, 0)?;
        println!();
        println!(
            "4-byte copy latency: H2D {:.2} µs, D2H {:.2} µs (raw cudarc H2D {:.2} µs)",
            h * 1e6,
            d * 1e6,
            raw * 1e6
        );
        Ok(())
    }

    fn human(n: usize) -> String {
        if n >= 1 << 30 {
            format!("{} GiB", n >> 30)
        } else if n >= 1 << 20 {
            format!("{} MiB", n >> 20)
        } else {
            format!("{} KiB", n >> 10)
        }
    }

    fn chrono_free_date() -> String {
        let out = std::process::Command::new("date")
            .arg("-u")
            .arg("+%Y-%m-%d")
            .output();
        out.ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    }
}
