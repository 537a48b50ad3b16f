//! The purging thread's nudge of an owner that takes no cold path.
//!
//! An owner hands its private lists over to the sweeps on its cold paths
//! only (`purge::owner_tick`). One that freed a
//! peak on its hot path and then allocates from those lists alone (a server
//! after a flush, with only its timers at work) never takes one, and keeps
//! the peak for as long as it lives. After each sweep the purging thread
//! points the alloc word of every owner that took no cold path for a whole
//! sweep at the empty block: the owner's next allocation takes the cold
//! path, which hands its lists over and points the word back. Only the word
//! changes hands, never a list, and its only other value is the one the
//! owner's own cold path restores; the hot paths are as they were.
//!
//! The words are the owner's thread-local storage, which goes away with its
//! thread: each owner registers the address of its words under its slab,
//! and a nudge holds that registration (its `BUSY` bit) while it reads
//! and writes them. An owner that gives its slab up (its end, a move)
//! removes the registration, and waits for a nudge under way to finish.
//! With the pthread-key words (Miri, other architectures) there is no
//! address to register, and no nudge.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::layout::NUM_SLABS;
use crate::{metadata, thread_words};

/// By slab: the address of its owner's thread words (0: none registered),
/// with [`BUSY`] while a nudge uses them.
static WORDS: [AtomicUsize; NUM_SLABS] = [const { AtomicUsize::new(0) }; NUM_SLABS];

/// In a [`WORDS`] entry: a nudge reads or writes the words (they are
/// 8-aligned, so the bit is free).
const BUSY: usize = 1;

/// Nudges made, ever (the statistics).
static NUDGED: AtomicU64 = AtomicU64::new(0);

/// Nudges made, ever.
pub(crate) fn nudged() -> u64 {
    // Relaxed: a statistic.
    NUDGED.load(Ordering::Relaxed)
}

/// Registers the calling thread, which just came to own `slab`.
pub(crate) fn register(slab: usize) {
    if let Some(words) = thread_words::address() {
        // Release: a nudge that reads the address (Acquire) finds the
        // thread's words as set before this.
        WORDS[slab].store(words, Ordering::Release);
    }
}

/// Removes the calling thread's registration under `slab`, which it is
/// giving up, once no nudge uses its words.
pub(crate) fn unregister(slab: usize) {
    unregister_in(&WORDS[slab], || {
        // SAFETY: no arguments; yields the CPU.
        unsafe { libc::sched_yield() };
    });
}

/// A registration cell: the entry of one slab in the registrations (generic over
/// the atomic for the model checker, like the list operations).
pub trait EntryCell {
    /// Atomic load.
    fn load(&self, order: Ordering) -> usize;
    /// Atomic store.
    fn store(&self, v: usize, order: Ordering);
    /// Atomic compare-and-swap.
    fn compare_exchange(
        &self,
        current: usize,
        new: usize,
        success: Ordering,
        failure: Ordering,
    ) -> Result<usize, usize>;
}

impl EntryCell for AtomicUsize {
    #[inline]
    fn load(&self, order: Ordering) -> usize {
        AtomicUsize::load(self, order)
    }
    #[inline]
    fn store(&self, v: usize, order: Ordering) {
        AtomicUsize::store(self, v, order)
    }
    #[inline]
    fn compare_exchange(
        &self,
        current: usize,
        new: usize,
        success: Ordering,
        failure: Ordering,
    ) -> Result<usize, usize> {
        AtomicUsize::compare_exchange(self, current, new, success, failure)
    }
}

/// Clears the registration in `entry` (the caller's), calling `wait`
/// while a nudge holds it. Once this returns, no nudge touches the words.
///
/// Built with `--cfg smalloc_blind_unregister` (tests only) it clears the
/// entry without waiting, so the model checker can show that the wait is
/// what keeps a nudge off words that went away.
pub fn unregister_in<E: EntryCell + ?Sized>(entry: &E, wait: impl Fn()) {
    if cfg!(smalloc_blind_unregister) {
        // Relaxed: the broken variant the model must catch.
        entry.store(0, Ordering::Relaxed);
        return;
    }
    loop {
        // Acquire: a nudge's accesses to our words, released when it
        // cleared BUSY, happen before we go on (and before the words go).
        let w = entry.load(Ordering::Acquire);
        if w & BUSY == 0 {
            // Acquire: as above. Only the owner and one nudge change the
            // entry, and the nudge sets BUSY first.
            if entry
                .compare_exchange(w, 0, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
            continue;
        }
        // A nudge is between two of its steps (or preempted there).
        wait();
    }
}

/// One nudge of the registration in `entry`: if it names words, holds it
/// while `at_words` reads and writes them (given their address); says
/// whether it did.
pub fn nudge_in<E: EntryCell + ?Sized>(entry: &E, at_words: impl FnOnce(usize)) -> bool {
    // Acquire: pairs with `register`'s Release.
    let w = entry.load(Ordering::Acquire);
    if w == 0 || w & BUSY != 0 {
        return false;
    }
    // Acquire: as above. Fails if the owner unregistered meanwhile.
    if entry
        .compare_exchange(w, w | BUSY, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return false;
    }
    at_words(w);
    // Release: our accesses to the words happen before the owner's
    // `unregister` returns.
    entry.store(w, Ordering::Release);
    true
}

/// After a sweep (epoch `epoch`), by the purging thread: nudges every
/// registered owner that took no cold path since the sweep before, unless
/// its alloc word already names the empty block.
pub(crate) fn idle_owners(epoch: u32) {
    let empty = metadata::empty_block();
    for entry in &WORDS {
        nudge_in(entry, |w| {
            // SAFETY: the owner registered its words at `w` and, while we
            // hold the registration, waits in `unregister` before they can
            // go away. They are 8-aligned words that its own code reads and
            // writes with single loads and stores, so atomic accesses here
            // see whole values.
            let (alloc, hint) = unsafe {
                (
                    &*(w as *const AtomicUsize).byte_add(thread_words::ALLOC),
                    &*(w as *const AtomicUsize).byte_add(thread_words::HINT),
                )
            };
            // Relaxed: the word only routes the owner's next allocation;
            // the lists it hands over synchronize on their own.
            let ticked = crate::home_slab::epoch_in_hint(hint.load(Ordering::Relaxed));
            if epoch.wrapping_sub(ticked) & crate::purge::EPOCH_MASK >= 2
                && alloc.load(Ordering::Relaxed) != empty
            {
                // Relaxed: as above.
                alloc.store(empty, Ordering::Relaxed);
                // Relaxed: a statistic; only this thread nudges.
                NUDGED.store(NUDGED.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            }
        });
    }
}

/// In a `fork` child: only the forking thread exists. It keeps its
/// registration, if it had one, under `owned` (the slab it owns, if any); a
/// nudge the parent's purging thread had under way is gone with it.
pub(crate) fn reset_after_fork(owned: Option<usize>) {
    for (slab, entry) in WORDS.iter().enumerate() {
        // Relaxed: the child has one thread.
        let keep = if owned == Some(slab) {
            entry.load(Ordering::Relaxed) & !BUSY
        } else {
            0
        };
        entry.store(keep, Ordering::Relaxed);
    }
}
