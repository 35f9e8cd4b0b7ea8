//! Reused scratch memory for kernels (im2col matrices, widened operands, index tables).
//!
//! A kernel takes a buffer from a per-thread pool and gives it back when the guard drops;
//! the next call reuses its capacity. After a method's first run no kernel allocates: the
//! pool holds buffers as large as the largest request seen.

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};

/// Element types with a scratch pool.
pub trait ScratchElem: Copy + 'static {
    #[doc(hidden)]
    fn with_pool<R>(f: impl FnOnce(&mut Vec<Vec<Self>>) -> R) -> R;
}

macro_rules! pool {
    ($($t:ty => $name:ident),*) => {$(
        thread_local! {
            static $name: RefCell<Vec<Vec<$t>>> = const { RefCell::new(Vec::new()) };
        }
        impl ScratchElem for $t {
            fn with_pool<R>(f: impl FnOnce(&mut Vec<Vec<Self>>) -> R) -> R {
                $name.with(|p| f(&mut p.borrow_mut()))
            }
        }
    )*};
}
// `u32`: the offset tables of gemm512's convolutions, which are their only users (a pool
// of its own keeps each user's buffer: kernels that hold two buffers of a pool and give
// them back in the order they took them swap the pool's buffers between calls).
pool!(f32 => F32_POOL, f64 => F64_POOL, usize => USIZE_POOL, i64 => I64_POOL, u32 => U32_POOL);

/// A scratch buffer on loan from the pool; derefs to a `Vec<T>`.
pub struct Scratch<T: ScratchElem> {
    v: Vec<T>,
}

/// Takes a buffer of `len` copies of `fill` (use `len = 0` and `push` to build one up).
pub fn take<T: ScratchElem>(len: usize, fill: T) -> Scratch<T> {
    let mut v = T::with_pool(|p| p.pop()).unwrap_or_default();
    v.clear();
    v.resize(len, fill);
    Scratch { v }
}

/// Takes a buffer of `len` elements whose values are unspecified (those a previous loan
/// left, `fill` where it grows): for callers that write every element before they read it,
/// without [`take`]'s fill of the whole buffer on every call.
pub fn take_dirty<T: ScratchElem>(len: usize, fill: T) -> Scratch<T> {
    let mut v = T::with_pool(|p| p.pop()).unwrap_or_default();
    v.truncate(len);
    v.resize(len, fill);
    Scratch { v }
}

impl<T: ScratchElem + std::fmt::Debug> std::fmt::Debug for Scratch<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.v.fmt(f)
    }
}

impl<T: ScratchElem> Deref for Scratch<T> {
    type Target = Vec<T>;
    fn deref(&self) -> &Vec<T> {
        &self.v
    }
}

impl<T: ScratchElem> DerefMut for Scratch<T> {
    fn deref_mut(&mut self) -> &mut Vec<T> {
        &mut self.v
    }
}

impl<T: ScratchElem> Drop for Scratch<T> {
    fn drop(&mut self) {
        let v = std::mem::take(&mut self.v);
        T::with_pool(|p| p.push(v));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused() {
        let p = {
            let a = take(1000, 0f32);
            a.as_ptr()
        };
        let b = take(10, 1f32);
        assert_eq!(b.as_ptr(), p, "the pooled buffer is reused");
        assert_eq!(b.len(), 10);
        assert!(b.iter().all(|&x| x == 1.0));
        let c = take(5, 0f32);
        assert_ne!(c.as_ptr(), p, "a second live buffer is distinct");
    }
}
