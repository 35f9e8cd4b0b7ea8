//! Tensors: shape metadata over a data pointer ([`TensorImpl`]), a borrowed view for
//! kernels ([`TensorRef`]), and an owned host tensor for users ([`Tensor`]).

use crate::{Device, DeviceMemoryBuffer, DeviceRegistry, Element, Error, Result, ScalarType};
use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::marker::PhantomData;
use std::ptr::NonNull;

/// Most dimensions a tensor may have (ExecuTorch's `kTensorDimensionLimit`).
pub const MAX_DIMS: usize = 16;

/// Alignment of host memory that etch allocates (arenas and owned tensors).
pub const HOST_ALIGNMENT: usize = 64;

/// How a tensor's shape may change at run time (`TensorShapeDynamism`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dynamism {
    /// The shape is fixed.
    Static,
    /// The shape may shrink below the serialized upper bound.
    DynamicBound,
    /// The shape is unbounded; etch bounds it by the memory the tensor has.
    DynamicUnbound,
}

impl Dynamism {
    /// Decodes the serialized value.
    pub fn from_i8(v: i8) -> Result<Self> {
        match v {
            0 => Ok(Dynamism::Static),
            1 => Ok(Dynamism::DynamicBound),
            2 => Ok(Dynamism::DynamicUnbound),
            o => Err(Error::invalid_program(format!(
                "unknown shape dynamism {o}"
            ))),
        }
    }
    /// Upstream-style name.
    pub fn name(self) -> &'static str {
        match self {
            Dynamism::Static => "static",
            Dynamism::DynamicBound => "dynamic_bound",
            Dynamism::DynamicUnbound => "dynamic_unbound",
        }
    }
}

/// Product of sizes, or `None` on overflow.
pub fn checked_numel(sizes: &[usize]) -> Option<usize> {
    sizes.iter().try_fold(1usize, |acc, &s| acc.checked_mul(s))
}

/// Checks that `dim_order` is a permutation of `0..ndim`.
pub fn validate_dim_order(dim_order: &[u8], ndim: usize) -> Result<()> {
    if dim_order.len() != ndim {
        return Err(Error::invalid_program(format!(
            "dim_order has {} entries for a {ndim}-d tensor",
            dim_order.len()
        )));
    }
    let mut seen = [false; MAX_DIMS];
    for &d in dim_order {
        let d = d as usize;
        if d >= ndim || seen[d] {
            return Err(Error::invalid_program(format!(
                "dim_order {dim_order:?} is not a permutation of 0..{ndim}"
            )));
        }
        seen[d] = true;
    }
    Ok(())
}

/// A tensor's metadata and data pointer, like ExecuTorch's `TensorImpl`.
///
/// It does not own its data: the pointer refers to a method's planned arena, a program's
/// mapped constants, device memory, or a caller's buffer. `Copy` is cheap (no heap).
#[derive(Clone, Copy)]
pub struct TensorImpl {
    dtype: ScalarType,
    ndim: u8,
    dynamism: Dynamism,
    device: Device,
    sizes: [usize; MAX_DIMS],
    dim_order: [u8; MAX_DIMS],
    strides: [usize; MAX_DIMS],
    data: *mut u8,
    capacity: usize,
}

// SAFETY: `TensorImpl` is plain metadata plus an address; whoever dereferences the address
// (kernels through `TensorRef`, the runtime) is responsible for synchronisation, and a
// method is executed by one thread at a time (`&mut Method`).
unsafe impl Send for TensorImpl {}
// SAFETY: as above; shared access only reads the metadata.
unsafe impl Sync for TensorImpl {}

impl std::fmt::Debug for TensorImpl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorImpl")
            .field("dtype", &self.dtype)
            .field("sizes", &self.sizes())
            .field("dim_order", &self.dim_order())
            .field("dynamism", &self.dynamism)
            .field("device", &self.device)
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl TensorImpl {
    /// Makes tensor metadata. `capacity` is the number of bytes available at `data`.
    /// Validates the rank, the dim order and that the bytes fit in `capacity`.
    pub fn new(
        dtype: ScalarType,
        sizes: &[usize],
        dim_order: Option<&[u8]>,
        dynamism: Dynamism,
        device: Device,
        data: *mut u8,
        capacity: usize,
    ) -> Result<Self> {
        let ndim = sizes.len();
        if ndim > MAX_DIMS {
            return Err(Error::invalid_program(format!(
                "tensor has {ndim} dims; at most {MAX_DIMS} are supported"
            )));
        }
        let mut t = TensorImpl {
            dtype,
            ndim: ndim as u8,
            dynamism,
            device,
            sizes: [0; MAX_DIMS],
            dim_order: [0; MAX_DIMS],
            strides: [0; MAX_DIMS],
            data,
            capacity,
        };
        t.sizes[..ndim].copy_from_slice(sizes);
        match dim_order {
            Some(order) => {
                validate_dim_order(order, ndim)?;
                t.dim_order[..ndim].copy_from_slice(order);
            }
            None => {
                for (i, d) in t.dim_order[..ndim].iter_mut().enumerate() {
                    *d = i as u8;
                }
            }
        }
        let nbytes = checked_numel(sizes)
            .and_then(|n| n.checked_mul(dtype.element_size()))
            .ok_or_else(|| Error::invalid_program(format!("tensor size {sizes:?} overflows")))?;
        if nbytes > capacity {
            return Err(Error::invalid_program(format!(
                "tensor of {nbytes} bytes ({dtype} {sizes:?}) does not fit its {capacity}-byte buffer"
            )));
        }
        t.compute_strides();
        Ok(t)
    }

    fn compute_strides(&mut self) {
        let n = self.ndim as usize;
        let mut stride = 1usize;
        for k in (0..n).rev() {
            let d = self.dim_order[k] as usize;
            self.strides[d] = stride;
            stride = stride.saturating_mul(self.sizes[d].max(1));
        }
    }

    /// Element type.
    pub fn dtype(&self) -> ScalarType {
        self.dtype
    }
    /// Number of dimensions.
    pub fn dim(&self) -> usize {
        self.ndim as usize
    }
    /// Sizes, outermost first.
    pub fn sizes(&self) -> &[usize] {
        &self.sizes[..self.ndim as usize]
    }
    /// Size of one dimension (negative counts from the end); errors when out of range.
    pub fn size(&self, dim: i64) -> Result<usize> {
        Ok(self.sizes[self.wrap_dim(dim)?])
    }
    /// Dim order (outermost to innermost in memory).
    pub fn dim_order(&self) -> &[u8] {
        &self.dim_order[..self.ndim as usize]
    }
    /// Strides in elements, derived from sizes and dim order.
    pub fn strides(&self) -> &[usize] {
        &self.strides[..self.ndim as usize]
    }
    /// Shape dynamism.
    pub fn dynamism(&self) -> Dynamism {
        self.dynamism
    }
    /// The device the data lives on.
    pub fn device(&self) -> Device {
        self.device
    }
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.sizes().iter().product()
    }
    /// Bytes of data for the current shape.
    pub fn nbytes(&self) -> usize {
        self.numel() * self.dtype.element_size()
    }
    /// Bytes available at the data pointer (the planned capacity).
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    /// True when the dim order is the default (row-major, `0..ndim`).
    pub fn is_default_dim_order(&self) -> bool {
        self.dim_order()
            .iter()
            .enumerate()
            .all(|(i, &d)| d as usize == i)
    }
    /// True when the dim order is channels-last (`0, 2, 3, 1` for 4-d).
    pub fn is_channels_last(&self) -> bool {
        self.ndim == 4 && self.dim_order() == [0, 2, 3, 1]
    }
    /// Lays the same sizes and memory out in another dim order (a load-time layout
    /// choice: the bytes are read again in the new order, nothing is moved).
    pub fn set_dim_order(&mut self, order: &[u8]) -> Result<()> {
        validate_dim_order(order, self.ndim as usize)?;
        self.dim_order[..order.len()].copy_from_slice(order);
        self.compute_strides();
        Ok(())
    }
    /// The raw data pointer (null for unbound inputs).
    pub fn data_ptr(&self) -> *mut u8 {
        self.data
    }
    /// The addresses of the tensor's memory (its whole capacity), if it has any: what the
    /// aliasing checks (kernel outputs, delegate outputs, in-place caches) compare.
    pub fn memory_range(&self) -> Option<std::ops::Range<usize>> {
        if self.data.is_null() || self.capacity == 0 {
            return None;
        }
        let start = self.data as usize;
        Some(start..start.saturating_add(self.capacity))
    }
    /// Points the tensor at other memory.
    pub fn set_data(&mut self, data: *mut u8, capacity: usize) {
        self.data = data;
        self.capacity = capacity;
    }
    /// Normalises a possibly negative dimension index.
    pub fn wrap_dim(&self, dim: i64) -> Result<usize> {
        wrap_dim(dim, self.dim())
    }

    /// Resizes to `new_sizes` following ExecuTorch's rules: a static tensor only accepts its
    /// own shape; a dynamic tensor keeps its rank and must fit its capacity.
    pub fn resize(&mut self, new_sizes: &[usize]) -> Result<()> {
        if new_sizes == self.sizes() {
            return Ok(());
        }
        if self.dynamism == Dynamism::Static {
            return Err(Error::invalid_argument(format!(
                "cannot resize a static tensor of shape {:?} to {new_sizes:?}",
                self.sizes()
            )));
        }
        if new_sizes.len() != self.dim() {
            return Err(Error::invalid_argument(format!(
                "cannot resize a {}-d tensor to {new_sizes:?}: the rank must stay the same",
                self.dim()
            )));
        }
        let nbytes = checked_numel(new_sizes)
            .and_then(|n| n.checked_mul(self.dtype.element_size()))
            .ok_or_else(|| Error::invalid_argument(format!("size {new_sizes:?} overflows")))?;
        if nbytes > self.capacity {
            return Err(Error::invalid_argument(format!(
                "cannot resize to {new_sizes:?} ({nbytes} bytes): exceeds the tensor's capacity of {} bytes",
                self.capacity
            )));
        }
        self.sizes[..new_sizes.len()].copy_from_slice(new_sizes);
        self.compute_strides();
        Ok(())
    }

    /// Changes the element type (used by the runtime when binding; sizes stay).
    pub fn with_dtype(mut self, dtype: ScalarType) -> Self {
        self.dtype = dtype;
        self
    }
}

/// Normalises a possibly negative dimension index against a rank (a 0-d tensor accepts
/// 0 and -1, as PyTorch does).
pub fn wrap_dim(dim: i64, ndim: usize) -> Result<usize> {
    let n = ndim.max(1) as i64;
    let d = if dim < 0 { dim + n } else { dim };
    if d < 0 || d >= n {
        return Err(Error::invalid_argument(format!(
            "dimension {dim} out of range for a {ndim}-d tensor"
        )));
    }
    Ok(d as usize)
}

/// A tensor as a kernel sees it: metadata plus data valid for the lifetime `'a` of the
/// method's memory.
#[derive(Clone, Copy, Debug)]
pub struct TensorRef<'a> {
    imp: TensorImpl,
    host_access: bool,
    _life: PhantomData<&'a mut [u8]>,
}

impl<'a> std::ops::Deref for TensorRef<'a> {
    type Target = TensorImpl;
    fn deref(&self) -> &TensorImpl {
        &self.imp
    }
}

impl<'a> TensorRef<'a> {
    /// Wraps metadata whose data stays valid for `'a`.
    ///
    /// # Safety
    /// `imp.data_ptr()` must be valid for reads and writes of `imp.capacity()` bytes for
    /// `'a` (or null with zero bytes), and host memory must be `HOST_ALIGNMENT`-aligned
    /// or at least aligned for the element type.
    pub unsafe fn new(imp: TensorImpl) -> Self {
        TensorRef {
            host_access: imp.device().is_cpu(),
            imp,
            _life: PhantomData,
        }
    }

    /// Like [`TensorRef::new`], for device memory that is ordinary host memory (the
    /// simulated device): CPU kernels may then read and write it.
    ///
    /// # Safety
    /// As for [`TensorRef::new`], and the data pointer must be host memory even when the
    /// tensor's device is not the CPU.
    pub unsafe fn new_host_accessible(imp: TensorImpl) -> Self {
        TensorRef {
            host_access: true,
            imp,
            _life: PhantomData,
        }
    }
    /// The metadata.
    pub fn imp(&self) -> &TensorImpl {
        &self.imp
    }

    fn check_access<T: Element>(&self) -> Result<()> {
        if !self.host_access {
            return Err(Error::invalid_argument(format!(
                "a CPU kernel cannot read a tensor on {}",
                self.device()
            )));
        }
        if T::SCALAR.element_size() != self.dtype().element_size()
            || (T::SCALAR != self.dtype()
                && !(self.dtype() == ScalarType::Bool && T::SCALAR == ScalarType::Byte))
        {
            return Err(Error::invalid_type(format!(
                "tensor is {}, read as {}",
                self.dtype(),
                T::SCALAR
            )));
        }
        if self.numel() > 0 {
            if self.data_ptr().is_null() {
                return Err(Error::invalid_state(
                    "tensor has no data (an input that was not set?)",
                ));
            }
            if !(self.data_ptr() as usize).is_multiple_of(std::mem::align_of::<T>()) {
                return Err(Error::invalid_program("tensor data is misaligned"));
            }
        }
        Ok(())
    }

    /// The elements (in memory order) as a slice of `T`; `T` must match the dtype
    /// (`u8` reads `Bool`).
    pub fn data<T: Element>(&self) -> Result<&'a [T]> {
        self.check_access::<T>()?;
        let n = self.numel();
        if n == 0 {
            return Ok(&[]);
        }
        // SAFETY: checked non-null, aligned and of matching element size; the memory is
        // valid for `'a` and holds at least `nbytes() <= capacity` bytes (constructor
        // contract). Every bit pattern is a valid `T` (`Element` contract).
        Ok(unsafe { std::slice::from_raw_parts(self.data_ptr() as *const T, n) })
    }

    /// The elements as a mutable slice. Kernels call this on their `out` tensors, which the
    /// loader checked do not overlap any input of the same call.
    pub fn data_mut<T: Element>(&mut self) -> Result<&'a mut [T]> {
        self.check_access::<T>()?;
        let n = self.numel();
        if n == 0 {
            return Ok(&mut []);
        }
        // SAFETY: as in `data`; exclusivity holds because the loader rejects programs whose
        // kernel outputs overlap their inputs, and each output is taken once per call.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.data_ptr() as *mut T, n) })
    }

    /// The raw bytes of the current shape.
    pub fn bytes(&self) -> Result<&'a [u8]> {
        let n = self.nbytes();
        if n == 0 {
            return Ok(&[]);
        }
        if self.data_ptr().is_null() {
            return Err(Error::invalid_state("tensor has no data"));
        }
        // SAFETY: `nbytes <= capacity`, memory valid for `'a`.
        Ok(unsafe { std::slice::from_raw_parts(self.data_ptr(), n) })
    }

    /// The raw bytes of the current shape, writable.
    pub fn bytes_mut(&mut self) -> Result<&'a mut [u8]> {
        let n = self.nbytes();
        if n == 0 {
            return Ok(&mut []);
        }
        if self.data_ptr().is_null() {
            return Err(Error::invalid_state("tensor has no data"));
        }
        // SAFETY: as in `bytes`; exclusivity as in `data_mut`.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.data_ptr(), n) })
    }
}

/// A heap buffer of host memory aligned to [`HOST_ALIGNMENT`], zero-initialised.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: `AlignedBuf` uniquely owns its allocation, like `Vec<u8>`.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access is read-only through `&self`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `len` zeroed bytes. Fails with `MemoryAllocationFailed` instead of aborting.
    pub fn zeroed(len: usize) -> Result<Self> {
        if len == 0 {
            return Ok(AlignedBuf {
                // A dangling but aligned pointer, never dereferenced for len 0.
                ptr: NonNull::new(HOST_ALIGNMENT as *mut u8).unwrap_or(NonNull::dangling()),
                len: 0,
            });
        }
        let layout = Layout::from_size_align(len, HOST_ALIGNMENT)
            .map_err(|_| Error::memory_allocation_failed(format!("cannot allocate {len} bytes")))?;
        // SAFETY: `layout` has non-zero size.
        let p = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(p).ok_or_else(|| {
            Error::memory_allocation_failed(format!("out of host memory allocating {len} bytes"))
        })?;
        Ok(AlignedBuf { ptr, len })
    }
    /// Copies bytes into a new buffer.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let mut b = Self::zeroed(bytes.len())?;
        b.as_mut_slice().copy_from_slice(bytes);
        Ok(b)
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `len` bytes (or dangling with len 0).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` gives exclusivity.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
    /// The base pointer.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    /// The base pointer, for read-only use.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }
    /// The base pointer for writes through raw pointers (kernels writing planned memory).
    /// No reference to the bytes is created; callers must not write while a slice from
    /// [`AlignedBuf::as_slice`] is alive.
    pub fn raw_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: allocated in `zeroed` with this exact layout.
            unsafe {
                dealloc(
                    self.ptr.as_ptr(),
                    Layout::from_size_align_unchecked(self.len, HOST_ALIGNMENT),
                )
            };
        }
    }
}

impl Clone for AlignedBuf {
    fn clone(&self) -> Self {
        // An allocation failure while cloning is unrecoverable in `Clone`; report it the way
        // std's collections do.
        match AlignedBuf::from_bytes(self.as_slice()) {
            Ok(b) => b,
            Err(_) => std::alloc::handle_alloc_error(
                Layout::from_size_align(self.len, HOST_ALIGNMENT).unwrap_or(Layout::new::<u8>()),
            ),
        }
    }
}

#[derive(Clone)]
enum Storage {
    Host(AlignedBuf),
    /// Device memory, shared by clones (written only through [`Tensor::copy_from`], which
    /// refuses while a clone shares it).
    Device(std::sync::Arc<DeviceMemoryBuffer>),
}

/// An owned, contiguous (row-major) tensor: what users pass as inputs and get back as
/// outputs. Its data lives on the host or on a device.
///
/// Host tensors give their elements directly ([`Tensor::as_slice`]). Device tensors move
/// through a device allocator: [`Tensor::to_cpu`], [`Tensor::to_device`],
/// [`Tensor::from_slice_on`], [`Tensor::empty_on`], [`Tensor::copy_from`]. Cloning a host
/// tensor copies it; cloning a device tensor shares its device memory, which is then
/// immutable until the clones are gone.
#[derive(Clone)]
pub struct Tensor {
    dtype: ScalarType,
    sizes: Vec<usize>,
    device: Device,
    storage: Storage,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tensor({} {:?} on {})",
            self.dtype, self.sizes, self.device
        )
    }
}

fn nbytes_of(dtype: ScalarType, sizes: &[usize]) -> Result<usize> {
    if sizes.len() > MAX_DIMS {
        return Err(Error::invalid_argument(format!(
            "{} dims; at most {MAX_DIMS} are supported",
            sizes.len()
        )));
    }
    checked_numel(sizes)
        .and_then(|n| n.checked_mul(dtype.element_size()))
        .ok_or_else(|| Error::invalid_argument(format!("size {sizes:?} overflows")))
}

impl Tensor {
    /// A zero-filled host tensor.
    pub fn zeros(dtype: ScalarType, sizes: &[usize]) -> Result<Self> {
        let n = nbytes_of(dtype, sizes)?;
        Ok(Tensor {
            dtype,
            sizes: sizes.to_vec(),
            device: Device::CPU,
            storage: Storage::Host(AlignedBuf::zeroed(n)?),
        })
    }
    /// A host tensor from elements in row-major order.
    pub fn from_slice<T: Element>(data: &[T], sizes: &[usize]) -> Result<Self> {
        let n = checked_numel(sizes).unwrap_or(usize::MAX);
        if n != data.len() {
            return Err(Error::invalid_argument(format!(
                "{} elements given for shape {sizes:?} ({n} elements)",
                data.len()
            )));
        }
        // SAFETY: `T: Element` is plain old data; viewing it as bytes is valid.
        let bytes = unsafe {
            std::slice::from_raw_parts(data.as_ptr() as *const u8, std::mem::size_of_val(data))
        };
        Tensor::from_bytes(T::SCALAR, sizes, bytes)
    }
    /// A host tensor from raw bytes in row-major order.
    pub fn from_bytes(dtype: ScalarType, sizes: &[usize], bytes: &[u8]) -> Result<Self> {
        let n = nbytes_of(dtype, sizes)?;
        if bytes.len() != n {
            return Err(Error::invalid_argument(format!(
                "{} bytes given for {dtype} {sizes:?} ({n} bytes)",
                bytes.len()
            )));
        }
        Ok(Tensor {
            dtype,
            sizes: sizes.to_vec(),
            device: Device::CPU,
            storage: Storage::Host(AlignedBuf::from_bytes(bytes)?),
        })
    }
    /// A 0-d host tensor holding one value.
    pub fn scalar<T: Element>(v: T) -> Result<Self> {
        Tensor::from_slice(&[v], &[])
    }
    /// An uninitialised tensor on `device` (zeros on the host).
    pub fn empty_on(
        dtype: ScalarType,
        sizes: &[usize],
        device: Device,
        registry: &DeviceRegistry,
    ) -> Result<Self> {
        if device.is_cpu() {
            return Tensor::zeros(dtype, sizes);
        }
        let n = nbytes_of(dtype, sizes)?;
        let buf =
            DeviceMemoryBuffer::create(registry, n, device.kind, device.index, HOST_ALIGNMENT)?;
        Ok(Tensor {
            dtype,
            sizes: sizes.to_vec(),
            device,
            storage: Storage::Device(std::sync::Arc::new(buf)),
        })
    }
    /// A tensor on `device` holding host elements (copied through the device's allocator).
    pub fn from_slice_on<T: Element>(
        data: &[T],
        sizes: &[usize],
        device: Device,
        registry: &DeviceRegistry,
    ) -> Result<Self> {
        Tensor::from_slice(data, sizes)?.to_device(device, registry)
    }
    /// Element type.
    pub fn dtype(&self) -> ScalarType {
        self.dtype
    }
    /// Sizes.
    pub fn sizes(&self) -> &[usize] {
        &self.sizes
    }
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.sizes.iter().product()
    }
    /// Bytes of data.
    pub fn nbytes(&self) -> usize {
        self.numel() * self.dtype.element_size()
    }
    /// The device the data lives on.
    pub fn device(&self) -> Device {
        self.device
    }
    /// True when the data is in host memory.
    pub fn is_cpu(&self) -> bool {
        self.device.is_cpu()
    }
    fn host_err(&self) -> Error {
        Error::invalid_argument(format!(
            "tensor lives on {}; copy it to the host with to_cpu() first",
            self.device
        ))
    }
    /// Raw bytes of a host tensor.
    pub fn as_bytes(&self) -> Result<&[u8]> {
        match &self.storage {
            Storage::Host(b) => Ok(b.as_slice()),
            Storage::Device(_) => Err(self.host_err()),
        }
    }
    /// Raw bytes of a host tensor, writable.
    pub fn as_bytes_mut(&mut self) -> Result<&mut [u8]> {
        let err = self.host_err();
        match &mut self.storage {
            Storage::Host(b) => Ok(b.as_mut_slice()),
            Storage::Device(_) => Err(err),
        }
    }
    /// The elements as a slice of `T`, which must match the dtype (`u8` reads `Bool`).
    pub fn as_slice<T: Element>(&self) -> Result<&[T]> {
        if !matches!(self.storage, Storage::Host(_)) {
            return Err(self.host_err());
        }
        // SAFETY: the buffer is HOST_ALIGNMENT-aligned, sized for numel elements and lives
        // as long as `self`.
        let r = unsafe { TensorRef::new(self.view()) };
        let s = r.data::<T>()?;
        // SAFETY: re-borrow with the lifetime of `&self`, which owns the memory.
        Ok(unsafe { std::slice::from_raw_parts(s.as_ptr(), s.len()) })
    }
    /// The elements as a mutable slice of `T`.
    pub fn as_mut_slice<T: Element>(&mut self) -> Result<&mut [T]> {
        self.as_slice::<T>()?;
        let n = self.numel();
        let Storage::Host(b) = &mut self.storage else {
            return Err(Error::internal("host storage vanished"));
        };
        if n == 0 {
            return Ok(&mut []);
        }
        // SAFETY: type and alignment were checked above; `&mut self` gives exclusivity.
        Ok(unsafe { std::slice::from_raw_parts_mut(b.as_mut_ptr() as *mut T, n) })
    }
    /// Copies the elements out into a `Vec<T>` (host tensors).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        Ok(self.as_slice::<T>()?.to_vec())
    }
    /// Converts every element to `f64` (host tensors; for comparisons and printing).
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        use half::{bf16, f16};
        Ok(match self.dtype {
            ScalarType::Float => self.as_slice::<f32>()?.iter().map(|&v| v as f64).collect(),
            ScalarType::Double => self.as_slice::<f64>()?.to_vec(),
            ScalarType::Half => self.as_slice::<f16>()?.iter().map(|v| v.to_f64()).collect(),
            ScalarType::BFloat16 => self
                .as_slice::<bf16>()?
                .iter()
                .map(|v| v.to_f64())
                .collect(),
            ScalarType::Byte | ScalarType::Bool => {
                self.as_bytes()?.iter().map(|&v| v as f64).collect()
            }
            ScalarType::Char => self.as_slice::<i8>()?.iter().map(|&v| v as f64).collect(),
            ScalarType::Short => self.as_slice::<i16>()?.iter().map(|&v| v as f64).collect(),
            ScalarType::Int => self.as_slice::<i32>()?.iter().map(|&v| v as f64).collect(),
            ScalarType::Long => self.as_slice::<i64>()?.iter().map(|&v| v as f64).collect(),
            other => {
                return Err(Error::not_supported(format!(
                    "cannot convert {other} elements to f64"
                )));
            }
        })
    }
    /// Copies the tensor to the host (through its device's allocator); a host tensor is
    /// cloned.
    pub fn to_cpu(&self) -> Result<Tensor> {
        if self.is_cpu() {
            return Ok(self.clone());
        }
        let mut out = Tensor::zeros(self.dtype, &self.sizes)?;
        out.copy_from(self, 0)?;
        Ok(out)
    }
    /// Copies the tensor to `device` through the registry's allocator: host → device,
    /// device → device (same device type), or device → host.
    pub fn to_device(&self, device: Device, registry: &DeviceRegistry) -> Result<Tensor> {
        if device.is_cpu() {
            return self.to_cpu();
        }
        let mut out = Tensor::empty_on(self.dtype, &self.sizes, device, registry)?;
        out.copy_from(self, 0)?;
        Ok(out)
    }
    /// Overwrites this tensor's elements with `src`'s, starting at element `offset` of
    /// `src` (same dtype; `src` must hold `offset + self.numel()` elements), without
    /// allocating: a host memcpy, or the devices' allocators for host ↔ device and
    /// device ↔ device copies (one device type). Meant for inputs kept in place across
    /// calls, such as a decode step's position taken from a table on the device.
    pub fn copy_from(&mut self, src: &Tensor, offset: usize) -> Result<()> {
        if src.dtype != self.dtype {
            return Err(Error::invalid_argument(format!(
                "copy_from: a {} tensor into a {} one",
                src.dtype, self.dtype
            )));
        }
        let es = self.dtype.element_size();
        let n = self.nbytes();
        let off = offset
            .checked_mul(es)
            .filter(|o| o.checked_add(n).is_some_and(|e| e <= src.nbytes()))
            .ok_or_else(|| {
                Error::invalid_argument(format!(
                    "copy_from: {} elements from element {offset} of a tensor of {}",
                    self.numel(),
                    src.numel()
                ))
            })?;
        if n == 0 {
            return Ok(());
        }
        let dev_alloc = |b: &DeviceMemoryBuffer| {
            b.allocator()
                .cloned()
                .ok_or_else(|| Error::internal("device tensor without an allocator"))
        };
        match (&mut self.storage, &src.storage) {
            (Storage::Host(d), Storage::Host(s)) => {
                d.as_mut_slice()[..n].copy_from_slice(&s.as_slice()[off..off + n]);
            }
            (Storage::Device(d), _) if std::sync::Arc::strong_count(d) > 1 => {
                return Err(Error::invalid_state(
                    "copy_from: this tensor's device memory is shared with a clone (clones \
                     share device memory, which is written only while unshared)",
                ));
            }
            (Storage::Device(d), Storage::Host(s)) => {
                dev_alloc(d)?.copy_host_to_device(
                    d.data(),
                    &s.as_slice()[off..off + n],
                    d.index(),
                )?;
            }
            (Storage::Host(d), Storage::Device(s)) => {
                let a = dev_alloc(s)?;
                a.copy_device_to_host(
                    &mut d.as_mut_slice()[..n],
                    s.data().wrapping_add(off),
                    s.index(),
                )?;
            }
            (Storage::Device(d), Storage::Device(s)) => {
                if self.device.kind != src.device.kind {
                    return Err(Error::not_supported(format!(
                        "copying from {} to {} needs a stop on the host: call to_cpu() first",
                        src.device, self.device
                    )));
                }
                dev_alloc(d)?.copy_device_to_device(
                    d.data(),
                    d.index(),
                    s.data().wrapping_add(off),
                    s.index(),
                    n,
                )?;
            }
        }
        Ok(())
    }
    /// Metadata pointing at this tensor's memory (static shape, default dim order).
    pub fn view(&self) -> TensorImpl {
        let (ptr, len) = match &self.storage {
            Storage::Host(b) => (b.as_ptr() as *mut u8, b.len()),
            Storage::Device(b) => (b.data(), b.size()),
        };
        match TensorImpl::new(
            self.dtype,
            &self.sizes,
            None,
            Dynamism::Static,
            self.device,
            ptr,
            len,
        ) {
            Ok(t) => t,
            // Unreachable: the constructors validated rank and size against the buffer.
            Err(_) => unreachable!("Tensor invariants guarantee a valid view"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_follow_dim_order() {
        let t = TensorImpl::new(
            ScalarType::Float,
            &[2, 3, 4, 5],
            Some(&[0, 2, 3, 1]),
            Dynamism::Static,
            Device::CPU,
            std::ptr::null_mut(),
            480,
        )
        .unwrap();
        assert_eq!(t.strides(), &[60, 1, 15, 3]);
        assert!(t.is_channels_last());
        let t = TensorImpl::new(
            ScalarType::Float,
            &[2, 3],
            None,
            Dynamism::Static,
            Device::CPU,
            std::ptr::null_mut(),
            24,
        )
        .unwrap();
        assert_eq!(t.strides(), &[3, 1]);
    }

    #[test]
    fn resize_rules() {
        let mut t = TensorImpl::new(
            ScalarType::Float,
            &[4, 3],
            None,
            Dynamism::DynamicBound,
            Device::cuda(0),
            std::ptr::null_mut(),
            48,
        )
        .unwrap();
        t.resize(&[2, 3]).unwrap();
        assert_eq!(t.sizes(), &[2, 3]);
        assert_eq!(t.device(), Device::cuda(0));
        assert!(t.resize(&[5, 3]).is_err());
        assert!(t.resize(&[6]).is_err());
        let mut s = TensorImpl::new(
            ScalarType::Float,
            &[4, 3],
            None,
            Dynamism::Static,
            Device::CPU,
            std::ptr::null_mut(),
            48,
        )
        .unwrap();
        assert!(s.resize(&[4, 3]).is_ok());
        assert!(s.resize(&[2, 3]).is_err());
    }

    #[test]
    fn owned_tensor_round_trip() {
        let t = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
        assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
        assert!(t.as_slice::<i32>().is_err());
        assert!(Tensor::from_slice(&[1.0f32], &[2]).is_err());
        assert!(Tensor::zeros(ScalarType::Float, &[usize::MAX, 2]).is_err());
    }
}
