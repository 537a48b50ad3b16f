//! Worker threads and the timed region.
//!
//! A batch starts `threads` fresh worker threads. Each runs the allocator's
//! thread hook, does its untimed setup, then meets the others at the
//! [`Gate`]; the clock starts when all have arrived and stops when the last
//! one calls [`Gate::stop`]. Untimed cleanup may follow `stop`.

use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::allocators::BenchAlloc;

/// The start line and finish line of one batch.
pub struct Gate {
    barrier: Barrier,
    base: Instant,
    start_ns: AtomicU64,
    end_ns: AtomicU64,
}

/// Proof that a worker stopped its clock, with its operation count.
pub struct Done(u64);

impl Gate {
    fn new(threads: usize) -> Gate {
        Gate {
            barrier: Barrier::new(threads),
            base: Instant::now(),
            start_ns: AtomicU64::new(u64::MAX),
            end_ns: AtomicU64::new(0),
        }
    }

    /// Waits until every worker is ready; the clock runs from the first
    /// worker leaving the barrier.
    pub fn start(&self) {
        self.barrier.wait();
        let now = self.base.elapsed().as_nanos() as u64;
        self.start_ns.fetch_min(now, Ordering::Relaxed);
    }

    /// Stops this worker's clock after `ops` operations.
    pub fn stop(&self, ops: u64) -> Done {
        let now = self.base.elapsed().as_nanos() as u64;
        self.end_ns.fetch_max(now, Ordering::Relaxed);
        Done(ops)
    }

    fn elapsed(&self) -> Duration {
        let start = self.start_ns.load(Ordering::Relaxed);
        let end = self.end_ns.load(Ordering::Relaxed);
        Duration::from_nanos(end.saturating_sub(start).max(1))
    }
}

/// What one batch measured.
#[derive(Clone, Copy, Debug)]
pub struct Batch {
    /// Operations done by all workers.
    pub ops: u64,
    /// Wall time from the gate opening to the last worker stopping.
    pub elapsed: Duration,
}

impl Batch {
    /// Nanoseconds per operation (wall time over all threads' operations).
    pub fn ns_per_op(&self) -> f64 {
        self.elapsed.as_nanos() as f64 / self.ops.max(1) as f64
    }
}

/// The order of round `round` of an interleaved run over `n` contestants
/// (allocators, builds): each round starts one further along (A B C ..,
/// B C .. A, ..), so slow drifts of the machine hit everyone alike.
pub fn rotation(round: usize, n: usize) -> impl Iterator<Item = usize> {
    (0..n).map(move |k| (round + k) % n)
}

/// Runs `f(thread_index, gate)` on `threads` fresh threads and times the
/// region between `gate.start()` and the last `gate.stop()`.
pub fn run<A, F>(a: &'static A, threads: usize, f: F) -> Batch
where
    A: BenchAlloc,
    F: Fn(usize, &Gate) -> Done + Sync,
{
    let gate = Gate::new(threads);
    let ops = thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (gate, f) = (&gate, &f);
                s.spawn(move || worker(a, || f(t, gate)).0)
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
    });
    Batch {
        ops,
        elapsed: gate.elapsed(),
    }
}

/// Like [`run`], but for smalloc the workers are all on one slab: each
/// worker moves itself to slab 0 (`smalloc::hooks::move_current_thread_to_slab`,
/// what a failover does) before its timed work. (smalloc gives live threads
/// distinct slabs, so they cannot be found there by chance.) Other
/// allocators get `threads` ordinary workers.
pub fn run_on_one_slab<A, F>(a: &'static A, threads: usize, f: F) -> Batch
where
    A: BenchAlloc,
    F: Fn(usize, &Gate) -> Done + Sync,
{
    if !A::IS_SMALLOC {
        return run(a, threads, f);
    }
    run(a, threads, |t, gate| {
        // The probe itself may collide with another worker's and fail over
        // (which is what the timed work measures), or take a freed slot of
        // another slab (before slab 0's next never-used step): pin again
        // until a probe comes from slab 0, keeping the others meanwhile.
        let mut kept = Vec::new();
        let pinned = (0..10_000).any(|_| {
            assert!(smalloc::hooks::move_current_thread_to_slab(0));
            let p = probe(a);
            kept.push(p);
            smalloc::layout::slab_of(p.addr()) == 0
        });
        for p in kept {
            // SAFETY: allocated by `probe` with PROBE and not freed.
            unsafe { a.dealloc(p, PROBE) };
        }
        assert!(pinned, "worker not on slab 0");
        f(t, gate)
    })
}

/// The probes' layout.
const PROBE: std::alloc::Layout = match std::alloc::Layout::from_size_align(16, 8) {
    Ok(l) => l,
    Err(_) => panic!(),
};

/// A probe block (whose address says its slab), to be freed with [`PROBE`].
fn probe<A: BenchAlloc>(a: &'static A) -> *mut u8 {
    // SAFETY: a valid non-zero layout.
    let p = unsafe { a.alloc(PROBE) };
    assert!(!p.is_null(), "probe allocation failed");
    p
}

/// Runs `f` on a fresh thread with the allocator's thread hooks around it
/// (for setup and cleanup that must not run on the harness's own threads).
pub fn on_worker<A, R, F>(a: &'static A, f: F) -> R
where
    A: BenchAlloc,
    R: Send,
    F: FnOnce() -> R + Send,
{
    thread::scope(|s| s.spawn(move || worker(a, f)).join().unwrap())
}

/// The body of every worker thread: hooks around `f`.
fn worker<A: BenchAlloc, R>(a: &'static A, f: impl FnOnce() -> R) -> R {
    a.thread_start();
    let r = f();
    a.thread_end();
    r
}
