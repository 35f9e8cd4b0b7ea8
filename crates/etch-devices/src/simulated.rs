//! A simulated accelerator: "device" memory is separate host allocations that the allocator
//! tracks, so tests and CI exercise every device code path without a GPU.

use crate::DeviceAllocator;
use crate::staging::{self, CopyEngine, StagingBuffer, StagingPlan};
use etch_core::{AlignedBuf, ByteSource, DeviceType, Error, Result};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Byte written over freed memory, so use-after-free shows up in results.
pub const POISON: u8 = 0xDB;

/// Counters of a [`SimulatedAllocator`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Allocations made.
    pub allocations: u64,
    /// Frees made.
    pub frees: u64,
    /// Allocations still alive.
    pub live_allocations: u64,
    /// Bytes still allocated.
    pub live_bytes: u64,
    /// The most bytes allocated at once.
    pub peak_bytes: u64,
    /// Host → device copies.
    pub h2d_copies: u64,
    /// Device → host copies.
    pub d2h_copies: u64,
    /// Device → device copies.
    pub d2d_copies: u64,
    /// Bytes moved host → device.
    pub h2d_bytes: u64,
    /// Bytes moved device → host.
    pub d2h_bytes: u64,
}

struct Block {
    buf: AlignedBuf,
    /// Offset of the aligned start within `buf`.
    start: usize,
    size: usize,
    index: i8,
    /// Checksums of the contents after the last write by an allowed writer, one per
    /// [`CHECKSUM_CHUNK`] bytes, so that a write re-hashes only the chunks it touched
    /// (re-hashing the whole allocation made chunked writes, such as zeroing a planned
    /// arena, quadratic: minutes for a few hundred MiB).
    sums: Vec<u64>,
}

/// Bytes covered by one checksum of a [`Block`].
const CHECKSUM_CHUNK: usize = 64 << 10;

impl Block {
    fn bytes(&self) -> &[u8] {
        &self.buf.as_slice()[self.start..self.start + self.size]
    }

    /// The chunk checksums of the current contents.
    fn current_sums(&self) -> Vec<u64> {
        self.bytes().chunks(CHECKSUM_CHUNK).map(checksum).collect()
    }

    /// Records a write of `n` bytes at offset `off` by an allowed writer.
    fn wrote(&mut self, off: usize, n: usize) {
        if n == 0 {
            return;
        }
        let first = off / CHECKSUM_CHUNK;
        let last = (off + n - 1) / CHECKSUM_CHUNK;
        for c in first..=last.min(self.sums.len().saturating_sub(1)) {
            let end = ((c + 1) * CHECKSUM_CHUNK).min(self.size);
            self.sums[c] = checksum(&self.bytes()[c * CHECKSUM_CHUNK..end]);
        }
    }
}

/// Freed blocks are kept (poisoned) up to this many bytes, so a stale pointer reads
/// poison instead of memory the host allocator reused.
const QUARANTINE_BYTES: usize = 64 << 20;

#[derive(Default)]
struct State {
    /// Live blocks by device address (aligned start).
    blocks: BTreeMap<usize, Block>,
    quarantine: std::collections::VecDeque<Block>,
    quarantine_bytes: usize,
    stats: SimStats,
}

/// A host-backed stand-in for a CUDA device, registered as [`DeviceType::Cuda`].
///
/// It counts live allocations and bytes (for leak checks), rejects pointers it did not
/// allocate, poisons freed memory, and records a checksum of each allocation after every
/// write made through its copy functions or declared by a kernel
/// ([`DeviceAllocator::mark_written`]); [`SimulatedAllocator::foreign_writes`] lists
/// allocations whose bytes changed otherwise (e.g. a host `memcpy` into device memory).
pub struct SimulatedAllocator {
    num_devices: i8,
    state: Mutex<State>,
    staging: Mutex<Option<SimStaging>>,
}

/// Staged copies on the simulated device: [`DeviceAllocator::copy_host_to_device_from`]
/// of at least `threshold` bytes runs the pipeline CUDA uses ([`crate::staging`]) through
/// `buffers` host buffers of `buffer_len` bytes, each transfer deferred until the pipeline
/// waits for its buffer (as if the DMA engine ran late). Off by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimStaging {
    /// Sources of at least this many bytes are staged.
    pub threshold: usize,
    /// Number of staging buffers.
    pub buffers: usize,
    /// Size of each (a multiple of [`crate::staging::SPLIT_ALIGN`]).
    pub buffer_len: usize,
    /// Chunking and threads.
    pub plan: StagingPlan,
}

fn checksum(b: &[u8]) -> u64 {
    // FNV-1a: cheap and good enough to notice any change.
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100_0000_01b3)
    })
}

impl SimulatedAllocator {
    /// A simulated device type with `num_devices` devices (`cuda:0 .. cuda:n-1`).
    pub fn new(num_devices: i8) -> Self {
        SimulatedAllocator {
            num_devices,
            state: Mutex::new(State::default()),
            staging: Mutex::new(None),
        }
    }

    /// Turns staged copies on (`Some`) or off (`None`, the default); see [`SimStaging`].
    pub fn set_staging(&self, staging: Option<SimStaging>) {
        if let Ok(mut s) = self.staging.lock() {
            *s = staging;
        }
    }

    /// The staging settings for a copy of `len` bytes, when it is staged.
    fn staging_for(&self, len: usize) -> Result<Option<SimStaging>> {
        let s = self
            .staging
            .lock()
            .map_err(|_| Error::internal("simulated staging lock poisoned"))?;
        Ok(s.filter(|s| len >= s.threshold))
    }

    /// A staged copy of `src` to `dst` (see [`SimStaging`]).
    fn copy_staged(
        &self,
        dst: *mut u8,
        src: &dyn ByteSource,
        index: i8,
        cfg: &SimStaging,
    ) -> Result<()> {
        Self::find(&*self.lock()?, dst as usize, src.len(), index)?;
        let mut bufs = Vec::with_capacity(cfg.buffers);
        for _ in 0..cfg.buffers {
            bufs.push(AlignedBuf::zeroed(cfg.buffer_len)?);
        }
        let views = bufs
            .iter_mut()
            .map(|b| StagingBuffer {
                ptr: b.as_mut_ptr(),
                len: cfg.buffer_len,
            })
            .collect();
        let mut engine = SimEngine {
            alloc: self,
            dst,
            index,
            pending: vec![None; bufs.len()],
            bufs,
            views,
        };
        staging::staged_copy(&mut engine, src, &cfg.plan)
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, State>> {
        self.state
            .lock()
            .map_err(|_| Error::internal("simulated allocator lock poisoned"))
    }

    fn check_index(&self, index: i8) -> Result<()> {
        if index < 0 || index >= self.num_devices {
            return Err(Error::invalid_argument(format!(
                "no simulated device cuda:{index} ({} simulated device{})",
                self.num_devices,
                if self.num_devices == 1 { "" } else { "s" }
            )));
        }
        Ok(())
    }

    /// The counters.
    pub fn stats(&self) -> SimStats {
        self.lock().map(|s| s.stats).unwrap_or_default()
    }

    /// Finds the block holding `[ptr, ptr+n)`; returns (block key, offset in block).
    fn find(state: &State, ptr: usize, n: usize, index: i8) -> Result<(usize, usize)> {
        let (&key, b) = state.blocks.range(..=ptr).next_back().ok_or_else(|| {
            Error::invalid_argument(format!("{ptr:#x} is not simulated device memory"))
        })?;
        let off = ptr - key;
        if off.checked_add(n).is_none_or(|end| end > b.size) {
            return Err(Error::invalid_argument(format!(
                "range {ptr:#x}+{n} is outside its simulated allocation ({} bytes)",
                b.size
            )));
        }
        if b.index != index {
            return Err(Error::invalid_argument(format!(
                "pointer {ptr:#x} belongs to cuda:{}, used as cuda:{index}",
                b.index
            )));
        }
        Ok((key, off))
    }

    /// True when `[ptr, ptr+n)` lies in a live allocation of this simulated device type.
    pub fn contains(&self, ptr: *const u8, n: usize) -> bool {
        let Ok(s) = self.lock() else { return false };
        let p = ptr as usize;
        s.blocks
            .range(..=p)
            .next_back()
            .is_some_and(|(&k, b)| p - k + n <= b.size)
    }

    fn record_write(&self, ptr: *const u8, n: usize) {
        if let Ok(mut s) = self.lock() {
            let p = ptr as usize;
            if let Some((&k, b)) = s.blocks.range_mut(..=p).next_back()
                && p - k + n <= b.size
            {
                b.wrote(p - k, n);
            }
        }
    }

    /// Device addresses of allocations whose bytes changed without going through the
    /// allocator's copy functions or [`DeviceAllocator::mark_written`].
    pub fn foreign_writes(&self) -> Vec<usize> {
        let Ok(s) = self.lock() else {
            return Vec::new();
        };
        s.blocks
            .iter()
            .filter(|(_, b)| b.current_sums() != b.sums)
            .map(|(&k, _)| k)
            .collect()
    }
}

/// The simulated device's copy engine: host buffers, transfers made when the pipeline
/// waits for a buffer or finishes.
struct SimEngine<'a> {
    alloc: &'a SimulatedAllocator,
    dst: *mut u8,
    index: i8,
    bufs: Vec<AlignedBuf>,
    views: Vec<StagingBuffer>,
    /// The transfer submitted from each buffer and not yet made: (length, offset).
    pending: Vec<Option<(usize, usize)>>,
}

impl SimEngine<'_> {
    fn complete(&mut self, slot: usize) -> Result<()> {
        let Some((len, off)) = self.pending.get_mut(slot).and_then(Option::take) else {
            return Ok(());
        };
        let bytes = self
            .bufs
            .get(slot)
            .and_then(|b| b.as_slice().get(..len))
            .ok_or_else(|| Error::internal("staged transfer outside its buffer"))?;
        // The destination range was checked against the allocation when the copy began;
        // `copy_host_to_device` checks it again.
        self.alloc
            .copy_host_to_device(self.dst.wrapping_add(off), bytes, self.index)
    }
}

// SAFETY: the buffers are `AlignedBuf`s the engine owns for its whole life, read only by
// `complete`, which runs inside `wait(slot)` (for that buffer) and `finish`, before they
// return; the pipeline writes a buffer only between `wait` and `submit`.
unsafe impl CopyEngine for SimEngine<'_> {
    fn buffers(&self) -> &[StagingBuffer] {
        &self.views
    }
    fn wait(&mut self, slot: usize) -> Result<()> {
        self.complete(slot)
    }
    fn submit(&mut self, slot: usize, len: usize, offset: usize) -> Result<()> {
        let p = self
            .pending
            .get_mut(slot)
            .ok_or_else(|| Error::internal(format!("no staging buffer {slot}")))?;
        if p.is_some() {
            return Err(Error::internal(format!(
                "staging buffer {slot} submitted again before its transfer was waited for"
            )));
        }
        *p = Some((len, offset));
        Ok(())
    }
    fn finish(&mut self) -> Result<()> {
        let mut r = Ok(());
        for slot in 0..self.pending.len() {
            let c = self.complete(slot);
            if r.is_ok() {
                r = c;
            }
        }
        r
    }
}

impl DeviceAllocator for SimulatedAllocator {
    fn device_type(&self) -> DeviceType {
        DeviceType::Cuda
    }

    fn host_accessible(&self) -> bool {
        true
    }

    fn mark_written(&self, ptr: *const u8, n: usize) {
        self.record_write(ptr, n);
    }

    fn allocate(&self, nbytes: usize, index: i8, alignment: usize) -> Result<*mut u8> {
        self.check_index(index)?;
        if !alignment.is_power_of_two() || alignment > 4096 {
            return Err(Error::invalid_argument(format!(
                "alignment {alignment} must be a power of two no larger than 4096"
            )));
        }
        // Over-allocate so the start can be aligned, and never hand out a zero-size block
        // (every allocation gets a distinct address).
        let total = nbytes.checked_add(alignment).ok_or_else(|| {
            Error::memory_allocation_failed(format!("cannot allocate {nbytes} bytes"))
        })?;
        let mut buf = AlignedBuf::zeroed(total).map_err(|e| {
            Error::memory_allocation_failed(format!(
                "simulated cuda:{index}: out of memory allocating {nbytes} bytes: {}",
                e.message()
            ))
        })?;
        let base = buf.as_mut_ptr() as usize;
        let start = base.next_multiple_of(alignment) - base;
        let addr = base + start;
        let mut s = self.lock()?;
        let mut block = Block {
            buf,
            start,
            size: nbytes,
            index,
            sums: Vec::new(),
        };
        block.sums = block.current_sums();
        s.blocks.insert(addr, block);
        s.stats.allocations += 1;
        s.stats.live_allocations += 1;
        s.stats.live_bytes += nbytes as u64;
        s.stats.peak_bytes = s.stats.peak_bytes.max(s.stats.live_bytes);
        Ok(addr as *mut u8)
    }

    fn deallocate(&self, ptr: *mut u8, index: i8) -> Result<()> {
        let mut s = self.lock()?;
        let key = ptr as usize;
        match s.blocks.get(&key) {
            Some(b) if b.index == index => {}
            Some(b) => {
                return Err(Error::invalid_argument(format!(
                    "freeing {key:#x} of cuda:{} as cuda:{index}",
                    b.index
                )));
            }
            None => {
                return Err(Error::invalid_argument(format!(
                    "freeing {key:#x}, which this allocator did not allocate (or already freed)"
                )));
            }
        }
        if let Some(mut b) = s.blocks.remove(&key) {
            b.buf.as_mut_slice().fill(POISON);
            s.stats.frees += 1;
            s.stats.live_allocations -= 1;
            s.stats.live_bytes -= b.size as u64;
            s.quarantine_bytes += b.buf.len();
            s.quarantine.push_back(b);
            while s.quarantine_bytes > QUARANTINE_BYTES {
                match s.quarantine.pop_front() {
                    Some(old) => s.quarantine_bytes -= old.buf.len(),
                    None => break,
                }
            }
        }
        Ok(())
    }

    fn transfer_stats(&self) -> etch_core::TransferStats {
        let s = self.stats();
        etch_core::TransferStats {
            h2d_bytes: s.h2d_bytes,
            h2d_copies: s.h2d_copies,
            d2h_bytes: s.d2h_bytes,
            d2h_copies: s.d2h_copies,
        }
    }

    fn copy_host_to_device(&self, dst: *mut u8, src: &[u8], index: i8) -> Result<()> {
        let mut s = self.lock()?;
        let (key, off) = Self::find(&s, dst as usize, src.len(), index)?;
        if let Some(b) = s.blocks.get_mut(&key) {
            let start = b.start + off;
            b.buf.as_mut_slice()[start..start + src.len()].copy_from_slice(src);
            b.wrote(off, src.len());
        }
        s.stats.h2d_copies += 1;
        s.stats.h2d_bytes += src.len() as u64;
        Ok(())
    }

    /// Produces the bytes straight into the simulated device memory (one copy, as
    /// `copy_host_to_device` counts it), or through [`crate::staging`] when staging is on.
    fn copy_host_to_device_from(
        &self,
        dst: *mut u8,
        src: &dyn ByteSource,
        index: i8,
    ) -> Result<()> {
        if let Some(plan) = self.staging_for(src.len())? {
            return self.copy_staged(dst, src, index, &plan);
        }
        let mut s = self.lock()?;
        let (key, off) = Self::find(&s, dst as usize, src.len(), index)?;
        let mut r = Ok(());
        if let Some(b) = s.blocks.get_mut(&key) {
            let start = b.start + off;
            r = src.read_into(0, &mut b.buf.as_mut_slice()[start..start + src.len()]);
            // Also after a failed read: what it wrote came through the allocator.
            b.wrote(off, src.len());
        }
        r?;
        s.stats.h2d_copies += 1;
        s.stats.h2d_bytes += src.len() as u64;
        Ok(())
    }

    fn copy_device_to_host(&self, dst: &mut [u8], src: *const u8, index: i8) -> Result<()> {
        let mut s = self.lock()?;
        let (key, off) = Self::find(&s, src as usize, dst.len(), index)?;
        if let Some(b) = s.blocks.get(&key) {
            let start = b.start + off;
            dst.copy_from_slice(&b.buf.as_slice()[start..start + dst.len()]);
        }
        s.stats.d2h_copies += 1;
        s.stats.d2h_bytes += dst.len() as u64;
        Ok(())
    }

    fn copy_device_to_device(
        &self,
        dst: *mut u8,
        dst_index: i8,
        src: *const u8,
        src_index: i8,
        nbytes: usize,
    ) -> Result<()> {
        let mut s = self.lock()?;
        let (skey, soff) = Self::find(&s, src as usize, nbytes, src_index)?;
        let (dkey, doff) = Self::find(&s, dst as usize, nbytes, dst_index)?;
        let tmp: Vec<u8> = match s.blocks.get(&skey) {
            Some(b) => b.buf.as_slice()[b.start + soff..b.start + soff + nbytes].to_vec(),
            None => return Err(Error::internal("simulated block vanished")),
        };
        if let Some(b) = s.blocks.get_mut(&dkey) {
            let start = b.start + doff;
            b.buf.as_mut_slice()[start..start + nbytes].copy_from_slice(&tmp);
            b.wrote(doff, nbytes);
        }
        s.stats.d2d_copies += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_round_trip_and_are_checked() {
        let a = SimulatedAllocator::new(2);
        let p = a.allocate(16, 1, 64).unwrap();
        assert_eq!(p as usize % 64, 0);
        a.copy_host_to_device(p, &[7u8; 16], 1).unwrap();
        let mut out = [0u8; 16];
        a.copy_device_to_host(&mut out, p, 1).unwrap();
        assert_eq!(out, [7u8; 16]);
        // Wrong index, out of range, foreign pointer.
        assert!(a.copy_device_to_host(&mut out, p, 0).is_err());
        assert!(a.copy_host_to_device(p, &[0u8; 17], 1).is_err());
        let host = [0u8; 16];
        assert!(a.copy_device_to_host(&mut out, host.as_ptr(), 1).is_err());
        assert!(a.allocate(8, 2, 8).is_err());
        assert!(a.allocate(8, -1, 8).is_err());
        assert!(a.allocate(8, 0, 3).is_err());
        // Device to device.
        let q = a.allocate(16, 0, 8).unwrap();
        a.copy_device_to_device(q, 0, p, 1, 16).unwrap();
        a.copy_device_to_host(&mut out, q, 0).unwrap();
        assert_eq!(out, [7u8; 16]);
        assert!(a.foreign_writes().is_empty());
        // A host write into "device" memory is detected.
        // SAFETY: `p` is a live simulated allocation of 16 bytes (host memory in disguise).
        unsafe { *p = 1 };
        assert_eq!(a.foreign_writes(), vec![p as usize]);
        a.deallocate(p, 1).unwrap();
        assert!(a.deallocate(p, 1).is_err());
        a.deallocate(q, 0).unwrap();
        let s = a.stats();
        assert_eq!((s.live_allocations, s.live_bytes), (0, 0));
        assert_eq!((s.h2d_copies, s.d2h_copies, s.d2d_copies), (1, 2, 1));
    }
}
