//! The staged host → device copy pipeline, independent of any driver: a source's bytes are
//! produced into a ring of staging buffers (pinned memory on a GPU) by several threads at
//! once, and each filled buffer is handed to a [`CopyEngine`] that moves it to the device
//! asynchronously, while the threads fill the next one.
//!
//! ```text
//! chunk i:  announce chunk i+2 (a prefetch thread passes it to the source) ->
//!           wait(slot i % n) -> fill the slot (T threads, disjoint shares) ->
//!           submit(slot, len, offset)                   ... the transfer runs meanwhile
//! end:      finish() (also after an error, so no transfer is left reading a buffer)
//! ```
//!
//! A buffer is written only after the engine says its previous transfer is done (`wait`),
//! and only until it is submitted again. CUDA's engine (`cuda.rs`) is pinned buffers, one
//! event per buffer and `cuMemcpyHtoDAsync` on the device's stream; the simulated device
//! and the tests drive the same pipeline with engines of their own.

use etch_core::{ByteSource, Error, Result};
use std::sync::mpsc;

/// Chunk and share boundaries are multiples of this many bytes (from the start of the
/// copy), so a converting source always sees whole elements.
pub const SPLIT_ALIGN: usize = 64;

/// A copy is cut into about this many chunks (within the plan's bounds), so mid-size copies
/// still overlap filling with transfers.
const TARGET_CHUNKS: usize = 4;

/// One staging buffer: `len` bytes at `ptr`.
#[derive(Debug, Clone, Copy)]
pub struct StagingBuffer {
    /// Start of the buffer (host memory).
    pub ptr: *mut u8,
    /// Its size in bytes.
    pub len: usize,
}

// SAFETY: a plain address and size; who may write through it is the `CopyEngine` contract.
unsafe impl Send for StagingBuffer {}
// SAFETY: as above.
unsafe impl Sync for StagingBuffer {}

/// Moves filled staging buffers to the destination.
///
/// # Safety
/// Implementors guarantee that every buffer [`CopyEngine::buffers`] returns is valid for
/// reads and writes of its `len` bytes while the engine lives, that nothing but the
/// engine's own transfers reads or writes it, and that once [`CopyEngine::wait`]`(slot)`
/// returns `Ok`, no transfer touches buffer `slot` until the next `submit(slot, ..)`. The
/// pipeline may then write the buffer from several threads.
pub unsafe trait CopyEngine {
    /// The staging buffers (a ring: chunk `i` uses buffer `i % len`).
    fn buffers(&self) -> &[StagingBuffer];

    /// Blocks until the transfer last submitted from buffer `slot` no longer reads it
    /// (at once when there was none).
    fn wait(&mut self, slot: usize) -> Result<()>;

    /// Starts moving the first `len` bytes of buffer `slot` to byte `offset` of the
    /// destination; may return before the transfer is done.
    fn submit(&mut self, slot: usize, len: usize, offset: usize) -> Result<()>;

    /// Blocks until every submitted transfer is complete.
    fn finish(&mut self) -> Result<()>;
}

/// How to cut a staged copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagingPlan {
    /// Smallest chunk (bytes; the largest is a staging buffer).
    pub min_chunk: usize,
    /// Threads that fill a chunk (the calling thread and `threads - 1` helpers).
    pub threads: usize,
    /// Smallest share of a chunk given to one thread (bytes).
    pub min_share: usize,
}

/// The chunk size for a copy of `total` bytes through buffers of `buffer_len` bytes:
/// about `total / 4`, at least `min_chunk`, at most a buffer, a multiple of
/// [`SPLIT_ALIGN`].
pub fn chunk_len(total: usize, buffer_len: usize, plan: &StagingPlan) -> usize {
    let max = buffer_len / SPLIT_ALIGN * SPLIT_ALIGN;
    let want = total
        .div_ceil(TARGET_CHUNKS)
        .max(plan.min_chunk)
        .next_multiple_of(SPLIT_ALIGN);
    want.min(max)
}

/// The threads that fill a chunk of `chunk` bytes: at most `plan.threads`, each with at
/// least `plan.min_share` bytes.
fn fill_threads(chunk: usize, plan: &StagingPlan) -> usize {
    let by_size = chunk.div_ceil(plan.min_share.max(SPLIT_ALIGN));
    plan.threads.clamp(1, 256).min(by_size).max(1)
}

/// A share of a staging buffer for one thread to fill from the source.
struct Job {
    ptr: *mut u8,
    len: usize,
    /// Where its bytes start in the source.
    offset: usize,
}

// SAFETY: the job's range of the staging buffer is written by the one thread that receives
// it, and by nothing else until that thread replies (see `fill`).
unsafe impl Send for Job {}

impl Job {
    /// Produces the job's bytes.
    ///
    /// # Safety
    /// `ptr` must be valid for writes of `len` bytes, with no other access to them until
    /// this returns.
    unsafe fn run(&self, src: &dyn ByteSource) -> Result<()> {
        // SAFETY: the caller's contract.
        let dst = unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) };
        src.read_into(self.offset, dst)
    }
}

/// The helper threads of one copy: the fillers, and the thread that passes residency
/// hints to the source.
struct Helpers {
    jobs: Vec<mpsc::Sender<Job>>,
    done: mpsc::Receiver<Result<()>>,
    prefetch: Option<mpsc::Sender<(usize, usize)>>,
}

/// Copies all of `src` through `engine`: see the module documentation. Returns the first
/// error (of the source or of the engine) after every transfer submitted has finished.
pub fn staged_copy(
    engine: &mut dyn CopyEngine,
    src: &dyn ByteSource,
    plan: &StagingPlan,
) -> Result<()> {
    let total = src.len();
    if total == 0 {
        return Ok(());
    }
    let buffers = engine.buffers().to_vec();
    let buffer_len = buffers.iter().map(|b| b.len).min().unwrap_or(0);
    let chunk = chunk_len(total, buffer_len, plan);
    if chunk == 0 {
        return Err(Error::internal(format!(
            "staged copy through {} staging buffer(s) of {buffer_len} bytes",
            buffers.len()
        )));
    }
    let threads = fill_threads(chunk.min(total), plan);
    std::thread::scope(|scope| {
        let (done_tx, done) = mpsc::channel::<Result<()>>();
        let mut jobs = Vec::with_capacity(threads - 1);
        for _ in 1..threads {
            let (tx, rx) = mpsc::channel::<Job>();
            let done_tx = done_tx.clone();
            scope.spawn(move || {
                for job in rx {
                    // SAFETY: `fill` hands each range of a buffer to one thread only, after
                    // `wait` freed the buffer, and submits it only after this reply.
                    let r = unsafe { job.run(src) };
                    if done_tx.send(r).is_err() {
                        break;
                    }
                }
            });
            jobs.push(tx);
        }
        // Residency hints for the chunks ahead, given off the critical path (`madvise`
        // walks the page cache even when every page is there); one chunk needs none.
        let prefetch = (total > chunk).then(|| {
            let (tx, rx) = mpsc::channel::<(usize, usize)>();
            scope.spawn(move || {
                for (offset, len) in rx {
                    src.prefetch(offset, len);
                }
            });
            tx
        });
        let helpers = Helpers {
            jobs,
            done,
            prefetch,
        };
        let r = copy_chunks(engine, src, &buffers, chunk, &helpers);
        // Closing the channels ends the helpers; the scope joins them.
        drop(helpers);
        let f = engine.finish();
        r.and(f)
    })
}

/// How many chunks ahead of the one being filled are announced to the source.
const PREFETCH_AHEAD: usize = 2;

/// The chunk loop of [`staged_copy`].
fn copy_chunks(
    engine: &mut dyn CopyEngine,
    src: &dyn ByteSource,
    buffers: &[StagingBuffer],
    chunk: usize,
    helpers: &Helpers,
) -> Result<()> {
    let total = src.len();
    let announce = |k: usize| {
        let offset = k.saturating_mul(chunk);
        if let Some(tx) = &helpers.prefetch
            && offset < total
        {
            // A hint: a stopped prefetch thread costs nothing but the hint.
            let _ = tx.send((offset, chunk.min(total - offset)));
        }
    };
    (0..PREFETCH_AHEAD).for_each(announce);
    let mut offset = 0;
    let mut i = 0;
    while offset < total {
        announce(i + PREFETCH_AHEAD);
        let len = chunk.min(total - offset);
        let slot = i % buffers.len();
        engine.wait(slot)?;
        fill(src, buffers[slot], offset, len, helpers)?;
        engine.submit(slot, len, offset)?;
        offset += len;
        i += 1;
    }
    Ok(())
}

/// Fills the first `len` bytes of `buf` with the source's `[offset, offset + len)`: the
/// helpers take one share each, the calling thread the first. Returns after every share
/// is written (also on error).
fn fill(
    src: &dyn ByteSource,
    buf: StagingBuffer,
    offset: usize,
    len: usize,
    helpers: &Helpers,
) -> Result<()> {
    if len > buf.len {
        return Err(Error::internal(format!(
            "a chunk of {len} bytes does not fit a {}-byte staging buffer",
            buf.len
        )));
    }
    let parts = helpers.jobs.len() + 1;
    let share = len.div_ceil(parts).next_multiple_of(SPLIT_ALIGN).max(1);
    let mut sent = 0;
    let mut result = Ok(());
    let mut start = share;
    for tx in &helpers.jobs {
        if start >= len {
            break;
        }
        let n = share.min(len - start);
        let job = Job {
            // `start + n <= len <= buf.len`: inside the buffer.
            ptr: buf.ptr.wrapping_add(start),
            len: n,
            offset: offset + start,
        };
        if tx.send(job).is_err() {
            result = Err(Error::internal("a staging copy thread stopped"));
            break;
        }
        sent += 1;
        start += n;
    }
    if result.is_ok() && start < len && sent == helpers.jobs.len() {
        result = Err(Error::internal("staged copy shares do not cover the chunk"));
    }
    let own = Job {
        ptr: buf.ptr,
        len: share.min(len),
        offset,
    };
    if result.is_ok() {
        // SAFETY: `[0, share)` of the buffer is this thread's; the helpers have the rest.
        result = unsafe { own.run(src) };
    }
    for _ in 0..sent {
        let r = helpers
            .done
            .recv()
            .unwrap_or_else(|_| Err(Error::internal("a staging copy thread stopped")));
        if result.is_ok() {
            result = r;
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use etch_core::AlignedBuf;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A fake engine: transfers are deferred until `wait`/`finish` (as if the DMA ran
    /// late), so a buffer refilled before its transfer completed corrupts the result.
    struct Fake {
        bufs: Vec<AlignedBuf>,
        views: Vec<StagingBuffer>,
        pending: Vec<Option<(usize, usize)>>,
        dst: Vec<u8>,
        submits: Vec<(usize, usize, usize)>,
        fail_submit_at: Option<usize>,
    }

    impl Fake {
        fn new(n: usize, len: usize, total: usize) -> Fake {
            let mut bufs: Vec<AlignedBuf> =
                (0..n).map(|_| AlignedBuf::zeroed(len).unwrap()).collect();
            let views = bufs
                .iter_mut()
                .map(|b| StagingBuffer {
                    ptr: b.as_mut_ptr(),
                    len,
                })
                .collect();
            Fake {
                bufs,
                views,
                pending: vec![None; n],
                dst: vec![0; total],
                submits: Vec::new(),
                fail_submit_at: None,
            }
        }

        fn complete(&mut self, slot: usize) {
            if let Some((len, off)) = self.pending[slot].take() {
                let b = &self.bufs[slot].as_slice()[..len];
                self.dst[off..off + len].copy_from_slice(b);
            }
        }
    }

    // SAFETY: the buffers are owned `AlignedBuf`s; a deferred transfer reads its buffer only
    // in `wait`/`finish`, before they return.
    unsafe impl CopyEngine for Fake {
        fn buffers(&self) -> &[StagingBuffer] {
            &self.views
        }
        fn wait(&mut self, slot: usize) -> Result<()> {
            self.complete(slot);
            Ok(())
        }
        fn submit(&mut self, slot: usize, len: usize, offset: usize) -> Result<()> {
            if self.fail_submit_at == Some(self.submits.len()) {
                return Err(Error::internal("injected transfer failure"));
            }
            assert!(
                self.pending[slot].is_none(),
                "slot {slot} refilled in flight"
            );
            self.pending[slot] = Some((len, offset));
            self.submits.push((slot, len, offset));
            Ok(())
        }
        fn finish(&mut self) -> Result<()> {
            for s in 0..self.pending.len() {
                self.complete(s);
            }
            Ok(())
        }
    }

    /// A source whose byte `i` is `byte(i)`, recording what it was asked.
    struct Pattern {
        len: usize,
        fail_at: Option<usize>,
        prefetched: Mutex<Vec<(usize, usize)>>,
        reads: AtomicUsize,
    }

    fn byte(i: usize) -> u8 {
        (i.wrapping_mul(31) ^ (i >> 8)) as u8
    }

    impl ByteSource for Pattern {
        fn len(&self) -> usize {
            self.len
        }
        fn read_into(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
            assert!(
                offset.is_multiple_of(SPLIT_ALIGN),
                "unaligned share {offset}"
            );
            assert!(offset + dst.len() <= self.len);
            if self
                .fail_at
                .is_some_and(|f| (offset..offset + dst.len()).contains(&f))
            {
                return Err(Error::invalid_program("injected read failure"));
            }
            self.reads.fetch_add(1, Ordering::Relaxed);
            for (k, d) in dst.iter_mut().enumerate() {
                *d = byte(offset + k);
            }
            Ok(())
        }
        fn prefetch(&self, offset: usize, len: usize) {
            self.prefetched.lock().unwrap().push((offset, len));
        }
    }

    fn pattern(len: usize) -> Pattern {
        Pattern {
            len,
            fail_at: None,
            prefetched: Mutex::new(Vec::new()),
            reads: AtomicUsize::new(0),
        }
    }

    fn plan(threads: usize) -> StagingPlan {
        StagingPlan {
            min_chunk: 256,
            threads,
            min_share: 64,
        }
    }

    #[test]
    fn every_byte_arrives_whatever_the_sizes_and_threads() {
        for total in [1, 63, 64, 65, 1000, 4096, 10_000, 65_537] {
            for (slots, buf) in [(1, 256), (2, 1024), (4, 4096)] {
                for threads in [1, 3, 8] {
                    let src = pattern(total);
                    let mut e = Fake::new(slots, buf, total);
                    staged_copy(&mut e, &src, &plan(threads)).unwrap();
                    let want: Vec<u8> = (0..total).map(byte).collect();
                    assert!(
                        e.dst == want,
                        "total {total} slots {slots} threads {threads}"
                    );
                    // Chunks in order, covering the copy once, ring slots.
                    let mut off = 0;
                    for (i, &(slot, len, o)) in e.submits.iter().enumerate() {
                        assert_eq!((slot, o), (i % slots, off));
                        assert!(len <= buf);
                        off += len;
                    }
                    assert_eq!(off, total);
                    // Each chunk of a copy of several is announced once, in order.
                    let pre = src.prefetched.lock().unwrap().clone();
                    let want: Vec<(usize, usize)> =
                        e.submits.iter().map(|&(_, len, o)| (o, len)).collect();
                    if want.len() > 1 {
                        assert_eq!(pre, want);
                    } else {
                        assert!(pre.is_empty());
                    }
                    assert!(src.reads.load(Ordering::Relaxed) >= e.submits.len());
                }
            }
        }
    }

    #[test]
    fn chunks_are_about_a_quarter_within_bounds() {
        let p = StagingPlan {
            min_chunk: 4 << 20,
            threads: 16,
            min_share: 1 << 20,
        };
        let buf = 64 << 20;
        assert_eq!(chunk_len(1 << 30, buf, &p), 64 << 20);
        assert_eq!(chunk_len(64 << 20, buf, &p), 16 << 20);
        assert_eq!(chunk_len(1 << 20, buf, &p), 4 << 20);
        assert_eq!(chunk_len(100, 100, &p), 64);
        assert_eq!(fill_threads(16 << 20, &p), 16);
        assert_eq!(fill_threads(3 << 20, &p), 3);
        assert_eq!(fill_threads(10, &p), 1);
    }

    #[test]
    fn errors_come_back_after_the_transfers_finish() {
        // A failing share: the error is returned, nothing is left pending, and no chunk at
        // or after the failure is submitted.
        let mut src = pattern(10_000);
        src.fail_at = Some(5_000);
        let mut e = Fake::new(2, 1024, 10_000);
        let err = staged_copy(&mut e, &src, &plan(4)).unwrap_err();
        assert!(err.message().contains("injected read failure"), "{err}");
        assert!(e.pending.iter().all(Option::is_none));
        assert!(e.submits.iter().all(|&(_, len, off)| off + len <= 5_000));
        // A failing transfer stops the copy.
        let src = pattern(10_000);
        let mut e = Fake::new(2, 1024, 10_000);
        e.fail_submit_at = Some(3);
        let err = staged_copy(&mut e, &src, &plan(4)).unwrap_err();
        assert!(err.message().contains("injected transfer failure"), "{err}");
        assert_eq!(e.submits.len(), 3);
        // No buffers at all is an error, not a panic.
        let mut e = Fake::new(0, 0, 10);
        assert!(staged_copy(&mut e, &pattern(10), &plan(2)).is_err());
    }
}
