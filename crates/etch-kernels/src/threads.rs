//! The worker pool kernels split large work over.
//!
//! One process-wide pool: the calling thread plus `num_threads() - 1` worker threads,
//! started on first use. The thread count comes from [`set_num_threads`], else from the
//! `ETCH_NUM_THREADS` environment variable (read once; `1` is single-threaded), else from
//! `std::thread::available_parallelism()`.
//!
//! [`run`] hands task indices out to the calling thread and the workers and returns when
//! every task is done. It allocates nothing: the job lives on the caller's stack and is
//! published through a pointer under the pool's mutex; workers spin briefly for the next
//! job before they sleep. Kernels split only work above a size threshold, and only along
//! independent outputs, so small tensors stay on the calling thread and results do not
//! depend on the thread count. A `run` from inside a task, or while another thread is
//! using the pool, runs its tasks one after another on the calling thread.

use std::cell::Cell;
use std::marker::PhantomData;
use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// Most threads the pool will use.
pub const MAX_THREADS: usize = 256;

static REQUESTED: AtomicUsize = AtomicUsize::new(0);

fn default_threads() -> usize {
    static DEFAULT: OnceLock<usize> = OnceLock::new();
    *DEFAULT.get_or_init(|| {
        std::env::var("ETCH_NUM_THREADS")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .min(MAX_THREADS)
    })
}

/// The number of threads kernels use, the calling thread included.
pub fn num_threads() -> usize {
    match REQUESTED.load(Ordering::Relaxed) {
        0 => default_threads(),
        n => n,
    }
}

/// Sets the number of threads kernels use, process-wide (`1`: single-threaded; `0`: back
/// to `ETCH_NUM_THREADS` or the number of CPUs). Takes effect at the next kernel; workers
/// are started by the first kernel that needs them.
pub fn set_num_threads(n: usize) {
    REQUESTED.store(n.min(MAX_THREADS), Ordering::Relaxed);
}

/// Tasks per thread when work is plentiful. One: the calling thread takes the first part
/// and the workers the next ones, so consecutive operations split the same way find their
/// data in the cache of the core that wrote it (measured: with four smaller tasks per
/// thread, taken in any order, elementwise ops after a split convolution ran up to 2x
/// slower than on one thread). A thread that is late loses the back of its share to the
/// others ([`run_shares`]).
pub const TASKS_PER_THREAD: usize = 1;

/// How many tasks to split `work` units over so that each task has at least `min_work`:
/// 1 when the work is too small to pay for waking other threads (or with one thread), at
/// most [`TASKS_PER_THREAD`] per thread.
pub fn tasks_for(work: usize, min_work: usize) -> usize {
    let threads = num_threads();
    if threads <= 1 {
        return 1;
    }
    (work / min_work.max(1)).clamp(1, threads * TASKS_PER_THREAD)
}

/// Range `t` of `0..n` split into `parts` near-equal contiguous ranges.
pub fn part(n: usize, parts: usize, t: usize) -> Range<usize> {
    let parts = parts.max(1);
    (t * n / parts)..((t + 1) * n / parts)
}

type TaskFn<'a> = dyn Fn(usize) + Sync + 'a;

/// A job on its caller's stack.
struct Job {
    /// Valid while the job is published or a worker holds it (see `run`).
    f: *const TaskFn<'static>,
    n: usize,
    next: AtomicUsize,
    panicked: AtomicBool,
}

struct State {
    /// The published job (null: none).
    job: *const Job,
    epoch: u64,
    /// Workers that took the current job, and how many may.
    joined: usize,
    limit: usize,
    sleeping: usize,
    workers: usize,
    /// Workers whose thread has started (its start-up allocations done).
    started: usize,
    /// The caller sleeps until the workers let go of its job.
    waiting: bool,
}

// SAFETY: the raw job pointer is only dereferenced under the protocol in `run`.
unsafe impl Send for State {}

struct Pool {
    state: Mutex<State>,
    work: Condvar,
    idle: Condvar,
    /// Mirrors `State::epoch` for lock-free spinning.
    epoch: AtomicU64,
    /// Workers holding the current job.
    refs: AtomicUsize,
}

static POOL: Pool = Pool {
    state: Mutex::new(State {
        job: std::ptr::null(),
        epoch: 0,
        joined: 0,
        limit: 0,
        sleeping: 0,
        workers: 0,
        started: 0,
        waiting: false,
    }),
    work: Condvar::new(),
    idle: Condvar::new(),
    epoch: AtomicU64::new(0),
    refs: AtomicUsize::new(0),
};

/// Held by the one thread that is running a job on the pool.
static BUSY: AtomicBool = AtomicBool::new(false);

/// How long an idle worker, or a caller waiting for workers, spins before it sleeps.
/// Long enough that workers stay awake between the parallel operations of one inference:
/// a sleeping worker is woken onto the caller's core and shares it for a while (with
/// 200 µs, two threads often ran a 3x3 convolution no faster than one).
const SPIN: Duration = Duration::from_millis(5);

thread_local! {
    static IN_TASK: Cell<bool> = const { Cell::new(false) };
}

/// The number of CPUs this process may use.
fn cpus() -> usize {
    static CPUS: OnceLock<usize> = OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// One round of a spin-wait: a CPU pause, or, with more threads than CPUs, a yield so the
/// thread with work gets the core. No yield otherwise: a yielding thread stays queued on
/// its core, and on this 2-vCPU host the worker then often shared the caller's core (a 3x3
/// convolution took the single-thread time on two threads).
#[inline(always)]
fn pause(spins: &mut u32) {
    *spins = spins.wrapping_add(1);
    if num_threads() > cpus() {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

fn lock() -> MutexGuard<'static, State> {
    POOL.state.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f(0)`, …, `f(n - 1)` on the pool (the calling thread takes part) and returns when
/// all have run. Tasks run in any order and concurrently: `f` must only write state that no
/// other task touches. Allocates nothing once the workers are started.
///
/// # Panics
/// If a task panics (a bug: kernels return errors), after every task has finished.
pub fn run(n: usize, f: &(dyn Fn(usize) + Sync)) {
    let threads = num_threads().min(n);
    if threads <= 1
        || IN_TASK.with(|t| t.get())
        || BUSY
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
    {
        (0..n).for_each(f);
        return;
    }
    struct Release;
    impl Drop for Release {
        fn drop(&mut self) {
            BUSY.store(false, Ordering::Release);
        }
    }
    let _busy = Release;
    if !start_workers(threads - 1) {
        (0..n).for_each(f);
        return;
    }
    // SAFETY: only the lifetime is erased; `f` outlives every use (below).
    let f: &'static TaskFn<'static> = unsafe { std::mem::transmute::<&TaskFn<'_>, _>(f) };
    let job = Job {
        f,
        n,
        next: AtomicUsize::new(0),
        panicked: AtomicBool::new(false),
    };
    {
        let mut st = lock();
        st.job = &job;
        st.epoch += 1;
        st.joined = 0;
        st.limit = threads - 1;
        POOL.epoch.store(st.epoch, Ordering::Release);
        if st.sleeping > 0 {
            POOL.work.notify_all();
        }
    }
    IN_TASK.with(|t| t.set(true));
    work(&job);
    IN_TASK.with(|t| t.set(false));
    // Unpublish, so no worker takes the job any more, then wait for those that did: after
    // that no one refers to `job` or `f`, and every task's writes are visible here.
    lock().job = std::ptr::null();
    let start = Instant::now();
    let mut spins = 0u32;
    while POOL.refs.load(Ordering::Acquire) != 0 {
        pause(&mut spins);
        if spins.is_multiple_of(64) && start.elapsed() > SPIN {
            let mut st = lock();
            st.waiting = true;
            while POOL.refs.load(Ordering::Acquire) != 0 {
                st = POOL.idle.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            st.waiting = false;
            break;
        }
    }
    if job.panicked.load(Ordering::Relaxed) {
        panic!("a kernel task panicked");
    }
}

/// Runs `f` over ranges that together cover `0..n` once, for `tasks` near-equal shares
/// (see [`run_shares`]).
pub fn run_parts(n: usize, tasks: usize, f: &(dyn Fn(Range<usize>) + Sync)) {
    run_shares(n, tasks, &|_, r| f(r));
}

/// Pieces a task claims its own share in (see [`run_shares`]).
pub const SHARE_STEPS: usize = 4;

/// Most shares [`run_shares`] balances; more run as fixed parts.
const SHARE_SLOTS: usize = 64;

fn pack(r: Range<usize>) -> u64 {
    r.start as u64 | (r.end as u64) << 32
}

fn unpack(v: u64) -> Range<usize> {
    (v as u32 as usize)..((v >> 32) as usize)
}

/// Claims the first `grain` unclaimed units of `share`.
fn claim_front(share: &AtomicU64, grain: usize) -> Option<Range<usize>> {
    let mut v = share.load(Ordering::Acquire);
    loop {
        let r = unpack(v);
        if r.is_empty() {
            return None;
        }
        let end = r.end.min(r.start + grain);
        match share.compare_exchange_weak(v, pack(end..r.end), Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => return Some(r.start..end),
            Err(now) => v = now,
        }
    }
}

/// Takes the back half of the largest unclaimed remainder among `shares`.
fn steal(shares: &[AtomicU64]) -> Option<Range<usize>> {
    loop {
        let (victim, v) = shares
            .iter()
            .map(|s| s.load(Ordering::Acquire))
            .enumerate()
            .max_by_key(|&(_, v)| unpack(v).len())?;
        let r = unpack(v);
        if r.is_empty() {
            return None;
        }
        let mid = r.end - r.len().div_ceil(2);
        let new = pack(r.start..mid);
        if shares[victim]
            .compare_exchange(v, new, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            return Some(mid..r.end);
        }
    }
}

/// Runs `f(t, range)` over ranges that together cover `0..n` once, for `tasks` tasks (see
/// [`run`]). Task `t` starts on its own share, [`part`]`(n, tasks, t)`, and claims it front
/// to back, [`SHARE_STEPS`] pieces at a time, so that consecutive operations split the same
/// way still find their data in the cache of the core that wrote it; a task whose share is
/// used up takes the back half of the largest unclaimed remainder and goes on with it as
/// its share. So a thread that is late (its core shared with another process, or a
/// slower core) does not set the pace, where fixed parts waited for it (measured on a
/// 2-vCPU host with one vCPU shared: the two-thread time of a network doubled).
///
/// Task indices are below `tasks` and each is run by one thread at a time, so scratch may
/// be indexed by it. How the ranges are cut depends on timing: `f`'s results must not
/// (kernels split only along independent outputs).
pub fn run_shares(n: usize, tasks: usize, f: &(dyn Fn(usize, Range<usize>) + Sync)) {
    let tasks = tasks.clamp(1, n.max(1));
    if tasks == 1 {
        f(0, 0..n);
        return;
    }
    // Fixed parts where `run` would run the tasks one after another anyway (one thread,
    // or inside a task): each then goes front to back, with nothing to balance.
    if tasks > SHARE_SLOTS
        || n > u32::MAX as usize
        || num_threads() <= 1
        || IN_TASK.with(|t| t.get())
    {
        run(tasks, &|t| f(t, part(n, tasks, t)));
        return;
    }
    let slots: [AtomicU64; SHARE_SLOTS] = [const { AtomicU64::new(0) }; SHARE_SLOTS];
    let shares = &slots[..tasks];
    for (t, s) in shares.iter().enumerate() {
        s.store(pack(part(n, tasks, t)), Ordering::Relaxed);
    }
    let grain = n.div_ceil(tasks * SHARE_STEPS);
    run(tasks, &|t| {
        let own = &shares[t];
        loop {
            while let Some(r) = claim_front(own, grain) {
                f(t, r);
            }
            match steal(shares) {
                // Only this task fills its own (empty) share; others only take from it.
                Some(r) => own.store(pack(r), Ordering::Release),
                None => return,
            }
        }
    });
}

/// Takes and runs the job's tasks until none is left.
fn work(job: &Job) {
    loop {
        let i = job.next.fetch_add(1, Ordering::Relaxed);
        if i >= job.n {
            return;
        }
        // SAFETY: `f` is alive while the job is (see `run`).
        let f = unsafe { &*job.f };
        if catch_unwind(AssertUnwindSafe(|| f(i))).is_err() {
            job.panicked.store(true, Ordering::Relaxed);
        }
    }
}

/// Starts workers until there are `want` (on first use; allocates then). False when none
/// could be started.
fn start_workers(want: usize) -> bool {
    // The CPU count (read from cgroup files, which allocates) before any worker spins on
    // it, so that it is never first read during a call.
    cpus();
    let mut st = lock();
    while st.workers < want {
        let name = format!("etch-worker-{}", st.workers);
        if std::thread::Builder::new()
            .name(name)
            .spawn(worker)
            .is_err()
        {
            break;
        }
        st.workers += 1;
    }
    // Wait until every worker runs: a thread allocates while it starts (its name for the
    // stack-overflow handler), which must not happen during a later call.
    while st.started < st.workers {
        st = POOL.idle.wait(st).unwrap_or_else(|e| e.into_inner());
    }
    st.workers > 0
}

fn worker() {
    IN_TASK.with(|t| t.set(true));
    lock().started += 1;
    POOL.idle.notify_all();
    let mut seen = 0u64;
    loop {
        let start = Instant::now();
        let mut spins = 0u32;
        while POOL.epoch.load(Ordering::Acquire) == seen {
            pause(&mut spins);
            if spins.is_multiple_of(64) && start.elapsed() > SPIN {
                break;
            }
        }
        let job = {
            let mut st = lock();
            while st.epoch == seen {
                st.sleeping += 1;
                st = POOL.work.wait(st).unwrap_or_else(|e| e.into_inner());
                st.sleeping -= 1;
            }
            seen = st.epoch;
            if st.job.is_null() || st.joined >= st.limit {
                continue;
            }
            st.joined += 1;
            POOL.refs.fetch_add(1, Ordering::Relaxed);
            st.job
        };
        // SAFETY: the caller keeps the job alive until `refs` is back to 0.
        work(unsafe { &*job });
        let st = lock();
        if POOL.refs.fetch_sub(1, Ordering::Release) == 1 && st.waiting {
            POOL.idle.notify_all();
        }
    }
}

/// A mutable buffer tasks share to write disjoint parts of it.
#[derive(Clone, Copy)]
pub struct SharedMut<'a, T> {
    ptr: *mut T,
    len: usize,
    _buf: PhantomData<&'a mut [T]>,
}

// SAFETY: tasks only reach the buffer through the unsafe accessors, whose callers promise
// disjoint access; `T: Send` lets the elements be written from another thread.
unsafe impl<T: Send> Send for SharedMut<'_, T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for SharedMut<'_, T> {}

impl<'a, T> SharedMut<'a, T> {
    /// Shares `buf` for the duration of its borrow.
    pub fn new(buf: &'a mut [T]) -> Self {
        SharedMut {
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
            _buf: PhantomData,
        }
    }

    /// The whole buffer's length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The base pointer (for strided writes through [`SharedMut::write`]).
    pub fn as_ptr(&self) -> *mut T {
        self.ptr
    }

    /// Elements `start..start + len`.
    ///
    /// # Safety
    /// No other task reads or writes these elements while the slice is alive.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice(&self, start: usize, len: usize) -> &mut [T] {
        assert!(
            start <= self.len && len <= self.len - start,
            "out of bounds"
        );
        // SAFETY: in bounds (checked); exclusive by the caller's promise.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), len) }
    }

    /// Writes element `i`.
    ///
    /// # Safety
    /// No other task reads or writes element `i` concurrently.
    #[inline(always)]
    pub unsafe fn write(&self, i: usize, v: T) {
        assert!(i < self.len, "out of bounds");
        // SAFETY: in bounds (checked); exclusive by the caller's promise.
        unsafe { self.ptr.add(i).write(v) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `body` with a counter for each of `0..n` and checks every one was hit once.
    fn each_once(n: usize, body: impl FnOnce(&(dyn Fn(usize) + Sync))) {
        let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
        body(&|i| {
            hits[i].fetch_add(1, Ordering::Relaxed);
        });
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
    }

    #[test]
    fn every_task_runs_once_with_any_thread_count() {
        for threads in [1, 2, 3, 8] {
            set_num_threads(threads);
            for n in [0, 1, 2, 7, 100, 1000] {
                each_once(n, |hit| run(n, hit));
            }
        }
        set_num_threads(0);
    }

    #[test]
    fn nested_runs_are_serial_and_complete() {
        set_num_threads(4);
        let total = AtomicUsize::new(0);
        run(8, &|_| {
            run(8, &|_| {
                total.fetch_add(1, Ordering::Relaxed);
            });
        });
        assert_eq!(total.load(Ordering::Relaxed), 64);
        set_num_threads(0);
    }

    #[test]
    fn parts_cover_the_range() {
        for n in [0, 1, 5, 17] {
            for parts in 1..6 {
                let v: Vec<usize> = (0..parts).flat_map(|t| part(n, parts, t)).collect();
                assert_eq!(v, (0..n).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn shares_cover_the_range_once() {
        for threads in [1, 2, 3, 8] {
            set_num_threads(threads);
            for n in [0, 1, 2, 7, 100, 1000] {
                for tasks in [1, 2, 3, 5, 70] {
                    each_once(n, |hit| {
                        run_shares(n, tasks, &|t, r| {
                            assert!(t < tasks.max(1));
                            r.for_each(hit);
                        })
                    });
                }
            }
        }
        set_num_threads(0);
    }

    #[test]
    fn a_late_task_loses_its_share() {
        set_num_threads(2);
        let n = 4000;
        let done: Vec<AtomicUsize> = (0..2).map(|_| AtomicUsize::new(0)).collect();
        let slept = AtomicBool::new(false);
        run_shares(n, 2, &|t, r| {
            if t == 1 && !slept.swap(true, Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
            }
            std::thread::sleep(Duration::from_micros(r.len() as u64));
            done[t].fetch_add(r.len(), Ordering::Relaxed);
        });
        let (a, b) = (
            done[0].load(Ordering::Relaxed),
            done[1].load(Ordering::Relaxed),
        );
        assert_eq!(a + b, n);
        // Task 1 slept through its first piece: task 0 took most of the rest of its share.
        assert!(a > n * 3 / 4, "task 0 ran {a} of {n}");
        set_num_threads(0);
    }

    #[test]
    fn disjoint_writes_through_a_shared_buffer() {
        set_num_threads(3);
        let mut buf = vec![0usize; 1000];
        let shared = SharedMut::new(&mut buf);
        run_parts(1000, 7, &|r| {
            // SAFETY: parts are disjoint.
            let s = unsafe { shared.slice(r.start, r.len()) };
            for (k, v) in s.iter_mut().enumerate() {
                *v = r.start + k;
            }
        });
        assert_eq!(buf, (0..1000).collect::<Vec<_>>());
        set_num_threads(0);
    }
}
