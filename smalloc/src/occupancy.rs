//! How many live threads are on each slab, so that a new thread takes
//! the least-occupied slab and the slab of a finished thread is reused by
//! the next new thread.
//!
//! Without this, a program that keeps creating and ending threads walks its
//! working set over every slab in turn (each new thread a new slab), and
//! each slab keeps the slots its threads freed: up to 16 times the memory
//! of one generation of threads. With it, a program that never has more
//! than `k` threads alive uses `k` slabs.
//!
//! The counts follow a thread when it moves to another slab, and drop when
//! it ends (noticed by [`home_slab`](crate::home_slab)). Only cold paths
//! touch this module.

use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use crate::layout::{NUM_SLABS, THREAD_SLABS};
use crate::sys;

/// Live threads on each slab.
static LIVE: [AtomicUsize; NUM_SLABS] = [const { AtomicUsize::new(0) }; NUM_SLABS];

/// Bit `i` set: some thread has allocated from slab `i` (as its home or
/// after a failover), so its lists may hold freed slots.
static EVER_USED: AtomicUsize = AtomicUsize::new(0);

/// Records that a thread allocates from `slab`. Cold paths only (a thread's
/// first allocation, failovers, moves).
#[inline]
pub fn note_used(slab: usize) {
    let bit = 1 << slab;
    // Relaxed: a hint of where freed slots may be; it only ever gains bits.
    if EVER_USED.load(Ordering::Relaxed) & bit == 0 {
        EVER_USED.fetch_or(bit, Ordering::Relaxed);
    }
}

/// The slabs some thread has allocated from, as a bit set.
#[inline]
pub fn ever_used() -> usize {
    // Relaxed: see `note_used`.
    EVER_USED.load(Ordering::Relaxed)
}

/// Threads that ever allocated (counted up to 2), since the process
/// started or since the `fork` that made it.
static SEEN: AtomicUsize = AtomicUsize::new(0);

/// Whether more than one thread ever allocated (in this process, since its
/// `fork`): the purge's thread is started only then.
#[inline]
pub fn many_threads_seen() -> bool {
    // Relaxed: a hint.
    SEEN.load(Ordering::Relaxed) > 1
}

/// When a thread last took a home slab: coarse monotonic milliseconds,
/// truncated (compared with wrapping arithmetic).
static LAST_START_MS: AtomicU32 = AtomicU32::new(0);

/// Whether a thread took a home slab within the last `ms` milliseconds
/// (the calling thread's own start counts).
pub fn started_within(ms: u32) -> bool {
    if cfg!(miri) {
        return false;
    }
    // Relaxed: a hint (see `take`).
    let last = LAST_START_MS.load(Ordering::Relaxed);
    (sys::coarse_ms() as u32).wrapping_sub(last) < ms
}

/// Takes the home slab for a new thread: the one with the fewest live
/// threads, the lowest number among equals, and counts the thread there.
pub fn take() -> usize {
    // Relaxed: see `many_threads_seen`.
    if SEEN.load(Ordering::Relaxed) < 2 {
        SEEN.fetch_add(1, Ordering::Relaxed);
    }
    if !cfg!(miri) {
        // Relaxed: a hint for the purging thread (`purger::thread_ended`).
        LAST_START_MS.store(sys::coarse_ms() as u32, Ordering::Relaxed);
    }
    // Relaxed throughout this module: the counts are a placement hint, not
    // a synchronization of data. The compare-and-swap only keeps two
    // threads starting at once from both taking the same emptiest slab.
    loop {
        let mut slab = 0;
        let mut fewest = usize::MAX;
        for (i, live) in LIVE.iter().enumerate().take(THREAD_SLABS) {
            let n = live.load(Ordering::Relaxed);
            if n < fewest {
                fewest = n;
                slab = i;
            }
        }
        if LIVE[slab]
            .compare_exchange(fewest, fewest + 1, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            return slab;
        }
    }
}

/// Whether more than one live thread is on `slab` (its owner shares it).
#[inline]
pub fn shared(slab: usize) -> bool {
    // Relaxed: a hint.
    live(slab).load(Ordering::Relaxed) > 1
}

/// Whether the calling thread, counted on `slab`, is the only live thread
/// there.
#[inline]
pub fn alone(slab: usize) -> bool {
    // Relaxed: a hint.
    live(slab).load(Ordering::Relaxed) == 1
}

/// The count of `slab` (a slab number; reduced modulo the slab count so
/// that no bounds check, and no panic, is on any allocation path).
#[inline]
fn live(slab: usize) -> &'static AtomicUsize {
    debug_assert!(slab < NUM_SLABS);
    &LIVE[slab % NUM_SLABS]
}

/// A thread moved from slab `from` to slab `to`.
pub fn moved(from: usize, to: usize) {
    if from != to {
        // Relaxed: a placement hint (see `take`).
        live(to).fetch_add(1, Ordering::Relaxed);
        live(from).fetch_sub(1, Ordering::Relaxed);
    }
}

/// A thread that lived on `slab` ended.
pub fn left(slab: usize) {
    // Relaxed: a placement hint (see `take`).
    live(slab).fetch_sub(1, Ordering::Relaxed);
}

/// In a `fork` child, where only the forking thread exists: it lives on
/// `mine` (if it has a slab), nobody else lives anywhere.
pub fn reset_after_fork(mine: Option<usize>) {
    for (i, live) in LIVE.iter().enumerate() {
        // Relaxed: the child has a single thread.
        live.store(usize::from(mine == Some(i)), Ordering::Relaxed);
    }
    // Relaxed: as above.
    SEEN.store(usize::from(mine.is_some()), Ordering::Relaxed);
}

/// Live threads per slab.
pub fn live_threads() -> [usize; NUM_SLABS] {
    core::array::from_fn(|i| LIVE[i].load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use core::alloc::{GlobalAlloc, Layout};
    use std::thread;
    use std::vec::Vec;

    use super::live_threads;
    use crate::Smalloc;
    use crate::layout::slab_of;

    fn alloc_here() -> usize {
        let l = Layout::from_size_align(32, 8).unwrap();
        // SAFETY: a non-zero layout; the block is freed right away.
        unsafe {
            let p = Smalloc.alloc(l);
            Smalloc.dealloc(p, l);
            p.addr()
        }
    }

    /// The calling thread's home slab after an allocation (a block may
    /// come from another slab: a sweep resetting the home slab's region
    /// makes claims there fail over for a moment).
    fn home_after_alloc() -> usize {
        alloc_here();
        slab_of(crate::home_slab::slab_addr(crate::home_slab::current()))
    }

    #[test]
    fn finished_threads_free_their_slab_for_the_next_thread() {
        let main_slab = home_after_alloc();
        assert_eq!(main_slab, 0, "the first thread takes slab 0");
        let first = thread::spawn(home_after_alloc).join().unwrap();
        assert_eq!(first, 1, "slab 0 is occupied by the main thread");
        // The thread has ended: its slab is free again (its key destructor
        // ran before join returned).
        assert_eq!(live_threads()[1], 0);
        let again: Vec<usize> = (0..20)
            .map(|_| thread::spawn(home_after_alloc).join().unwrap())
            .collect();
        assert!(again.iter().all(|&s| s == 1), "{again:?}");
        // Threads alive at the same time spread over distinct slabs.
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(5));
        let hs: Vec<_> = (0..5)
            .map(|_| {
                let b = barrier.clone();
                thread::spawn(move || {
                    let s = home_after_alloc();
                    b.wait();
                    s
                })
            })
            .collect();
        let mut slabs: Vec<usize> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        slabs.sort();
        assert_eq!(slabs, [1, 2, 3, 4, 5]);
    }

    #[test]
    fn a_new_thread_waits_out_a_sweeps_claim_of_its_slab() {
        use crate::home_slab::{is_owner, owned};
        use core::sync::atomic::Ordering::Relaxed;
        use std::sync::mpsc::channel;
        // No sweep of ours: the test holds the claim a sweep would, and
        // makes slab 1's tail read "used up" as a sweep's reset does, so
        // the thread's allocation there fails over to another slab.
        crate::purge::set_delay_ms(0);
        assert_eq!(home_after_alloc(), 0);
        assert!(crate::ownership::claim(1), "nobody owns slab 1 yet");
        let sc = crate::layout::size_class(32, 8);
        let slab1 = crate::layout::slab_addr(crate::geometry::base_raw(), 1);
        let tail = &crate::metadata::shared(slab1, sc).tail;
        assert_eq!(tail.load(Relaxed), 0, "slab 1 never used");
        tail.store(crate::layout::num_slots(sc), Relaxed);
        let (placed_tx, placed_rx) = channel();
        let (released_tx, released_rx) = channel::<()>();
        let h = thread::spawn(move || {
            // Kept until the end: freed, the slot it failed over to would
            // draw the thread to that slab once it owns one (freed slots
            // before new memory).
            let l = Layout::from_size_align(32, 8).unwrap();
            // SAFETY: a non-zero layout.
            let kept = unsafe { Smalloc.alloc(l) };
            let here = slab_of(crate::home_slab::slab_addr(crate::home_slab::current()));
            let during = (here, is_owner(owned()));
            placed_tx.send(()).unwrap();
            released_rx.recv().unwrap();
            let after = (home_after_alloc(), is_owner(owned()));
            // SAFETY: allocated above with `l`, freed once.
            unsafe { Smalloc.dealloc(kept, l) };
            (during, after)
        });
        placed_rx.recv().unwrap();
        tail.store(0, Relaxed);
        crate::ownership::release(1);
        released_tx.send(()).unwrap();
        let (during, after) = h.join().unwrap();
        assert_eq!(during, (1, false), "on its slab's shared lists meanwhile");
        assert_eq!(after, (1, true), "the owner of its slab once it is free");
        assert_eq!(live_threads()[2], 0, "no other slab taken up");
    }
}
