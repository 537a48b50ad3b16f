//! Worst cases for smalloc's design, where threads meet on one free list.
//!
//! * `one-slab`: every thread allocates and frees 64-byte blocks (a window
//!   of 16 per thread, random replacement). For smalloc the harness puts
//!   all threads on the same slab, so they share one free-list head per
//!   size class (smalloc moves a thread to another slab when its CAS
//!   collides; this measures how well that works). Peers get ordinary
//!   threads. One op = one alloc+free.
//! * `one-slab-free`: rounds of: thread 0 allocates 4096 blocks of 64
//!   bytes (so for smalloc they all come from one slab), then all threads
//!   free an equal share of them at once, so every free targets one
//!   free-list head (peers: frees to a remote thread's heap). One op = one
//!   block allocated and freed.

use std::sync::Barrier;
use std::sync::atomic::{AtomicUsize, Ordering};

use devutils::Rng;

use super::mem::{alloc_touched, free};
use super::{Done, Gate, Params};
use crate::allocators::BenchAlloc;

/// Block size of both workloads.
const SIZE: usize = 64;
/// Live blocks per thread in `one-slab`.
const WINDOW: usize = 16;
/// Blocks per round of `one-slab-free`.
pub const ROUND: usize = 4096;

/// `one-slab`, thread `t`.
pub fn one_slab<A: BenchAlloc>(a: &'static A, p: &Params, t: usize, g: &Gate) -> Done {
    let mut rng = Rng::new(p.seed ^ t as u64);
    let mut live: Vec<*mut u8> = (0..WINDOW).map(|_| alloc_touched(a, SIZE, 1)).collect();
    let n = p.per_thread();
    g.start();
    for i in 0..n {
        let b = &mut live[rng.below(WINDOW as u64) as usize];
        // SAFETY: every window entry is a live block of `SIZE` bytes.
        unsafe { free(a, *b, SIZE) };
        *b = alloc_touched(a, SIZE, i as u8);
    }
    let done = g.stop(n);
    for b in live {
        // SAFETY: as above.
        unsafe { free(a, b, SIZE) };
    }
    done
}

/// Shared state of `one-slab-free`: the round's blocks and a barrier.
pub struct Rounds {
    blocks: Vec<AtomicUsize>,
    barrier: Barrier,
}

impl Rounds {
    /// State for `threads` threads.
    pub fn new(threads: usize) -> Rounds {
        Rounds {
            blocks: (0..ROUND).map(|_| AtomicUsize::new(0)).collect(),
            barrier: Barrier::new(threads),
        }
    }
}

/// `one-slab-free`, thread `t`. Every thread runs the same number of
/// rounds (`ops / ROUND`, at least 1).
pub fn one_slab_free<A: BenchAlloc>(
    a: &'static A,
    p: &Params,
    t: usize,
    g: &Gate,
    st: &Rounds,
) -> Done {
    let rounds = (p.ops as usize / ROUND).max(1);
    let share = ROUND.div_ceil(p.threads);
    let mine = (t * share).min(ROUND)..((t + 1) * share).min(ROUND);
    g.start();
    for _ in 0..rounds {
        if t == 0 {
            for (i, e) in st.blocks.iter().enumerate() {
                let b = alloc_touched(a, SIZE, i as u8);
                e.store(b.expose_provenance(), Ordering::Relaxed);
            }
        }
        // The barrier orders thread 0's stores before the loads below.
        st.barrier.wait();
        for e in &st.blocks[mine.clone()] {
            let b: *mut u8 = std::ptr::with_exposed_provenance_mut(e.load(Ordering::Relaxed));
            // SAFETY: thread 0 allocated it this round; only this thread
            // frees this share.
            unsafe { free(a, b, SIZE) };
        }
        st.barrier.wait();
    }
    g.stop(if t == 0 { (rounds * ROUND) as u64 } else { 0 })
}
