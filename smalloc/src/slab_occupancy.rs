//! How many live threads call each slab home, so that a new thread takes
//! the least-occupied slab and the slab of a finished thread is reused by
//! the next new thread.
//!
//! Without this, a program that keeps creating and ending threads walks its
//! working set over every slab in turn (each new thread a new slab), and
//! each slab keeps the slots its threads freed: up to 16 times the memory
//! of one generation of threads. With it, a program that never has more
//! than `k` threads alive uses `k` slabs.
//!
//! A thread's end is noticed through a pthread key destructor (the key's
//! value is the thread's home slab plus one). Only the cold path of a
//! thread's first allocation and its exit touch this module.

use core::ffi::c_void;
use core::sync::atomic::{AtomicUsize, Ordering};

use crate::layout::NUM_SLABS;

/// Live threads whose home is each slab.
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

/// The slabs no live thread calls home, as a bit set.
#[inline]
pub fn unowned() -> usize {
    // Relaxed: a placement hint.
    LIVE.iter()
        .enumerate()
        .filter(|(_, live)| live.load(Ordering::Relaxed) == 0)
        .fold(0, |set, (i, _)| set | 1 << i)
}

/// The exit-notification key plus one; 0 while not created; `usize::MAX`
/// if it could not be created (then counts only ever grow, and the choice
/// degrades to round robin, which is what the counts then produce).
static EXIT_KEY: AtomicUsize = AtomicUsize::new(0);
const NO_KEY: usize = usize::MAX;

/// Takes the home slab for a new thread: the one with the fewest live
/// threads, the lowest number among equals, and counts the thread there.
pub fn take() -> usize {
    // Relaxed throughout this module: the counts are a placement hint, not
    // a synchronization of data. The compare-and-swap only keeps two
    // threads starting at once from both taking the same emptiest slab.
    loop {
        let mut slab = 0;
        let mut fewest = usize::MAX;
        for (i, live) in LIVE.iter().enumerate() {
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

/// Arranges for the current thread's end to release its place on `slab`
/// (taken with [`take`]).
pub fn leave_at_exit(slab: usize) {
    if let Some(key) = exit_key() {
        // SAFETY: a valid key; the value is an integer in pointer form,
        // never dereferenced. glibc stores values of the first 32 keys
        // without allocating; for later keys it may call calloc, which
        // reaches this allocator with the thread's slab already set.
        unsafe { libc::pthread_setspecific(key, core::ptr::without_provenance(slab + 1)) };
    }
}

/// The key whose destructor reports a thread's end, created on first use.
fn exit_key() -> Option<libc::pthread_key_t> {
    // Acquire/AcqRel: the key value is published with the store; nothing
    // else rides on it.
    match EXIT_KEY.load(Ordering::Acquire) {
        0 => {}
        NO_KEY => return None,
        k => return Some((k - 1) as libc::pthread_key_t),
    }
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: `key` is a valid out-pointer; the destructor is a plain
    // function that only touches atomics.
    if unsafe { libc::pthread_key_create(&mut key, Some(thread_exit)) } != 0 {
        // Only the first creator's failure sticks; a later success elsewhere
        // would have stored its key first.
        let _ = EXIT_KEY.compare_exchange(0, NO_KEY, Ordering::AcqRel, Ordering::Acquire);
        return None;
    }
    match EXIT_KEY.compare_exchange(0, key as usize + 1, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Some(key),
        Err(winner) => {
            // SAFETY: we created `key` and nobody else has seen it.
            unsafe { libc::pthread_key_delete(key) };
            (winner != NO_KEY).then(|| (winner - 1) as libc::pthread_key_t)
        }
    }
}

/// Key destructor, run by the C library when a thread that allocated ends.
extern "C" fn thread_exit(value: *mut c_void) {
    let slab = value.addr().wrapping_sub(1);
    if slab < NUM_SLABS {
        // Relaxed: a placement hint (see `join`).
        LIVE[slab].fetch_sub(1, Ordering::Relaxed);
    }
}

/// Live threads per slab.
#[cfg(test)]
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

    #[test]
    fn finished_threads_free_their_slab_for_the_next_thread() {
        let main_slab = slab_of(alloc_here());
        assert_eq!(main_slab, 0, "the first thread takes slab 0");
        let first = thread::spawn(|| slab_of(alloc_here())).join().unwrap();
        assert_eq!(first, 1, "slab 0 is occupied by the main thread");
        // The thread has ended: its slab is free again (its key destructor
        // ran before join returned).
        assert_eq!(live_threads()[1], 0);
        let again: Vec<usize> = (0..20)
            .map(|_| thread::spawn(|| slab_of(alloc_here())).join().unwrap())
            .collect();
        assert!(again.iter().all(|&s| s == 1), "{again:?}");
        // Threads alive at the same time spread over distinct slabs.
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(5));
        let hs: Vec<_> = (0..5)
            .map(|_| {
                let b = barrier.clone();
                thread::spawn(move || {
                    let s = slab_of(alloc_here());
                    b.wait();
                    s
                })
            })
            .collect();
        let mut slabs: Vec<usize> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        slabs.sort();
        assert_eq!(slabs, [1, 2, 3, 4, 5]);
    }
}
