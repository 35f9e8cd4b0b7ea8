//! Every CUDA source compiles with NVRTC, without a GPU: CI installs NVRTC from the
//! `nvidia-cuda-nvrtc` wheel and sets `ETCH_REQUIRE_NVRTC=1`, so a kernel that does not
//! compile fails CI rather than the GPU machine.

use etch_kernels_cuda::{Family, compile_fresh, nvrtc_available};

#[test]
fn every_cuda_source_compiles_with_nvrtc() {
    if !nvrtc_available() {
        assert!(
            std::env::var("ETCH_REQUIRE_NVRTC").as_deref() != Ok("1"),
            "ETCH_REQUIRE_NVRTC=1 but libnvrtc was not found (add its folder to LD_LIBRARY_PATH)"
        );
        eprintln!("skipped: libnvrtc not found (set ETCH_REQUIRE_NVRTC=1 to make this fail)");
        return;
    }
    // Hopper (the H200) and Ampere, the architectures etch is run on.
    for arch in ["compute_90", "compute_80"] {
        for &f in Family::ALL {
            let ptx = compile_fresh(f, arch)
                .unwrap_or_else(|e| panic!("{}.cu for {arch}: {e}", f.name()));
            assert!(ptx.to_src().contains(".entry"), "{}: no kernels", f.name());
        }
    }
}
