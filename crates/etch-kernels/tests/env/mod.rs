//! The test harness shared by `kernels.rs` and `kernels_models.rs`: a value table whose
//! tensors point into owned buffers, helpers to build arguments, run a kernel and compare.
#![allow(dead_code)]

pub use etch_core::{
    Device, Dynamism, EValue, Element, ErrorCode, IntList, KernelContext, Result, ScalarType,
    Tensor, TensorImpl, TensorRef, bf16, f16,
};
pub use etch_kernels::portable_registry;

/// A value table plus the owned buffers its tensors point into.
#[derive(Default)]
pub struct Env {
    pub vals: Vec<EValue>,
    pub bufs: Vec<Tensor>,
}

impl Env {
    pub fn push(&mut self, v: EValue) -> u32 {
        self.vals.push(v);
        (self.vals.len() - 1) as u32
    }
    pub fn tensor_impl(
        &mut self,
        t: Tensor,
        sizes: &[usize],
        order: Option<&[u8]>,
        dy: Dynamism,
    ) -> u32 {
        let imp = TensorImpl::new(
            t.dtype(),
            sizes,
            order,
            dy,
            Device::CPU,
            t.as_bytes().unwrap().as_ptr() as *mut u8,
            t.as_bytes().unwrap().len(),
        )
        .unwrap();
        self.bufs.push(t);
        self.push(EValue::Tensor(imp))
    }
    pub fn t<T: Element>(&mut self, data: &[T], sizes: &[usize]) -> u32 {
        let t = Tensor::from_slice(data, sizes).unwrap();
        self.tensor_impl(t, sizes, None, Dynamism::Static)
    }
    /// A tensor whose memory holds `data` in the given dim order (data in memory order).
    pub fn t_ordered<T: Element>(&mut self, data: &[T], sizes: &[usize], order: &[u8]) -> u32 {
        let t = Tensor::from_slice(data, &[data.len()]).unwrap();
        self.tensor_impl(t, sizes, Some(order), Dynamism::Static)
    }
    pub fn out(&mut self, dt: ScalarType, sizes: &[usize]) -> u32 {
        let t = Tensor::zeros(dt, sizes).unwrap();
        self.tensor_impl(t, sizes, None, Dynamism::Static)
    }
    pub fn out_ordered(&mut self, dt: ScalarType, sizes: &[usize], order: &[u8]) -> u32 {
        let t = Tensor::zeros(dt, sizes).unwrap();
        self.tensor_impl(t, sizes, Some(order), Dynamism::Static)
    }
    /// A dynamic out with capacity for `cap` (its initial shape).
    pub fn dyn_out(&mut self, dt: ScalarType, cap: &[usize]) -> u32 {
        let t = Tensor::zeros(dt, cap).unwrap();
        self.tensor_impl(t, cap, None, Dynamism::DynamicBound)
    }
    pub fn int(&mut self, v: i64) -> u32 {
        self.push(EValue::Int(v))
    }
    pub fn dbl(&mut self, v: f64) -> u32 {
        self.push(EValue::Double(v))
    }
    pub fn boolean(&mut self, v: bool) -> u32 {
        self.push(EValue::Bool(v))
    }
    pub fn none(&mut self) -> u32 {
        self.push(EValue::None)
    }
    pub fn string(&mut self, s: &str) -> u32 {
        self.push(EValue::String(s.into()))
    }
    pub fn ints(&mut self, v: &[i64]) -> u32 {
        self.push(EValue::IntList(IntList {
            items: Box::new([]),
            vals: v.into(),
            dynamic: false,
        }))
    }
    pub fn list(&mut self, v: &[u32]) -> u32 {
        self.push(EValue::TensorList(v.into()))
    }
    pub fn run(&mut self, op: &str, args: &[u32]) -> Result<()> {
        let reg = portable_registry();
        let f = reg
            .get(op)
            .unwrap_or_else(|| panic!("{op} is not registered"));
        // SAFETY: every tensor points into a buffer owned by `self.bufs`.
        let mut ctx = unsafe { KernelContext::new(&mut self.vals, args, op) };
        f(&mut ctx)
    }
    pub fn imp(&self, i: u32) -> TensorImpl {
        *self.vals[i as usize].as_tensor().unwrap()
    }
    pub fn sizes(&self, i: u32) -> Vec<usize> {
        self.imp(i).sizes().to_vec()
    }
    pub fn get<T: Element>(&self, i: u32) -> Vec<T> {
        // SAFETY: as in `run`.
        let r = unsafe { TensorRef::new(self.imp(i)) };
        r.data::<T>().unwrap().to_vec()
    }
    pub fn getf(&self, i: u32) -> Vec<f64> {
        let imp = self.imp(i);
        match imp.dtype() {
            ScalarType::Float => self.get::<f32>(i).iter().map(|&v| v as f64).collect(),
            ScalarType::Double => self.get::<f64>(i),
            ScalarType::Half => self.get::<f16>(i).iter().map(|v| v.to_f64()).collect(),
            ScalarType::BFloat16 => self.get::<bf16>(i).iter().map(|v| v.to_f64()).collect(),
            ScalarType::Long => self.get::<i64>(i).iter().map(|&v| v as f64).collect(),
            ScalarType::Int => self.get::<i32>(i).iter().map(|&v| v as f64).collect(),
            ScalarType::Bool | ScalarType::Byte => {
                self.get::<u8>(i).iter().map(|&v| v as f64).collect()
            }
            d => panic!("unhandled {d}"),
        }
    }
}

/// The deterministic test input also used by the golden generator.
pub fn inp(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (((i * 7 + seed * 13) % 23) as f64 / 23.0 * 4.0 - 2.0) as f32)
        .collect()
}

#[track_caller]
pub fn close(got: &[f64], want: &[f32], tol: f64) {
    assert_eq!(got.len(), want.len(), "length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let w = w as f64;
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "element {i}: got {g}, want {w}"
        );
    }
}

#[track_caller]
pub fn code(r: Result<()>, c: ErrorCode) {
    match r {
        Ok(()) => panic!("expected {c:?}, got Ok"),
        Err(e) => assert_eq!(e.code(), c, "{e}"),
    }
}
