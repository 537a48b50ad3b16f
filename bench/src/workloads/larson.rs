//! `larson` (after Larson and Krishnan's server simulation): a shared
//! array of live blocks, 512 per thread, each block recording its size in
//! its first 8 bytes. Each op picks a random entry anywhere in the array,
//! puts a new block there (16 B - 1 KiB) and frees the block it replaced,
//! which usually another thread allocated. One op = one replacement.

use std::sync::atomic::{AtomicUsize, Ordering};

use devutils::Rng;

use super::mem::{alloc_touched, free};
use super::{Done, Gate, Params};
use crate::allocators::BenchAlloc;
use crate::harness;

/// Entries of the shared array per thread.
const PER_THREAD: usize = 512;

/// The shared array for `threads` threads (entries are exposed addresses).
pub fn table(threads: usize) -> Vec<AtomicUsize> {
    (0..threads * PER_THREAD)
        .map(|_| AtomicUsize::new(0))
        .collect()
}

/// A new block of `size` bytes with its size in its header.
fn make<A: BenchAlloc>(a: &A, size: usize) -> usize {
    let p = alloc_touched(a, size, 7);
    // SAFETY: `p` has `size >= 16` bytes and is 8-aligned.
    unsafe { (p as *mut u64).write(size as u64) };
    p.expose_provenance()
}

/// Frees a block made by [`make`].
///
/// # Safety
/// `addr` is a live block from `make` that the caller now owns.
unsafe fn unmake<A: BenchAlloc>(a: &A, addr: usize) {
    let p: *mut u8 = std::ptr::with_exposed_provenance_mut(addr);
    // SAFETY: the header was written by `make` (per the contract) and the
    // swap that handed us the block ordered that write before this read.
    unsafe {
        let size = (p as *const u64).read() as usize;
        free(a, p, size);
    }
}

/// Thread `t`: fills its share of the array, then replaces random entries.
pub fn thread<A: BenchAlloc>(
    a: &'static A,
    p: &Params,
    t: usize,
    g: &Gate,
    table: &[AtomicUsize],
) -> Done {
    let mut rng = Rng::new(p.seed ^ t as u64);
    for e in &table[t * PER_THREAD..(t + 1) * PER_THREAD] {
        e.store(make(a, rng.log_size(16, 1024)), Ordering::Release);
    }
    let n = p.per_thread();
    g.start();
    for _ in 0..n {
        let new = make(a, rng.log_size(16, 1024));
        let e = &table[rng.below(table.len() as u64) as usize];
        let old = e.swap(new, Ordering::AcqRel);
        // SAFETY: the swap took `old` out of the table: we own it. Entries
        // are filled before the gate opens, so `old` is never 0.
        unsafe { unmake(a, old) };
    }
    g.stop(n)
}

/// Frees what is left in the table (untimed, on a worker thread).
pub fn cleanup<A: BenchAlloc>(a: &'static A, table: &[AtomicUsize]) {
    harness::on_worker(a, || {
        for e in table {
            // SAFETY: every worker finished; each entry is a live block.
            unsafe { unmake(a, e.swap(0, Ordering::Acquire)) };
        }
    })
}
