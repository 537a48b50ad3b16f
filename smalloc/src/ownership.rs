//! Which slabs have an owner: a thread that alone may touch the slab's
//! private lists (see [`private_list`](crate::private_list)).
//!
//! The owned set is one word, a bit per slab. A thread claims a slab by
//! setting its bit (it owns the slab if the bit was clear) and releases it
//! by clearing the bit: one atomic each, on cold paths only (a thread's
//! first allocation, a move to another slab, its exit). The claim is an
//! Acquire and the release a Release, both read-modify-writes of the one
//! word, so the next owner sees every write the previous owner made to the
//! private lists, whatever other slabs were claimed in between.
//!
//! Generic over the word for the model checker, like the list operations.

use core::sync::atomic::{AtomicUsize, Ordering};

use crate::layout::{NUM_SLABS, RESERVED_SLABS};

/// The word holding the owned set.
pub trait SetCell {
    /// Atomic `fetch_or`.
    fn fetch_or(&self, bits: usize, order: Ordering) -> usize;
    /// Atomic `fetch_and`.
    fn fetch_and(&self, bits: usize, order: Ordering) -> usize;
}

impl SetCell for AtomicUsize {
    #[inline(always)]
    fn fetch_or(&self, bits: usize, order: Ordering) -> usize {
        AtomicUsize::fetch_or(self, bits, order)
    }
    #[inline(always)]
    fn fetch_and(&self, bits: usize, order: Ordering) -> usize {
        AtomicUsize::fetch_and(self, bits, order)
    }
}

/// Claims `slab` in `set`: true if it had no owner (the caller owns it now).
///
/// Built with `--cfg smalloc_no_ownership_check` (tests only) every claim
/// succeeds, so the model checker can show that exclusive ownership is what
/// keeps two threads off one private list.
#[inline]
pub fn claim_in<S: SetCell + ?Sized>(set: &S, slab: usize) -> bool {
    debug_assert!(slab < NUM_SLABS);
    let bit = 1 << slab;
    // Acquire: the previous owner's writes to the private lists, released by
    // its `release_in`, happen-before ours.
    let old = set.fetch_or(bit, Ordering::Acquire);
    old & bit == 0 || cfg!(smalloc_no_ownership_check)
}

/// Releases `slab`, which the caller owns, in `set`.
#[inline]
pub fn release_in<S: SetCell + ?Sized>(set: &S, slab: usize) {
    debug_assert!(slab < NUM_SLABS);
    // Release: publishes our writes to the private lists to the next owner.
    set.fetch_and(!(1 << slab), Ordering::Release);
}

/// The process's owned set.
/// The slabs no thread lives on ([`layout::RESERVED_SLABS`]) count as owned
/// for good, so nobody claims them.
static OWNED: AtomicUsize = AtomicUsize::new(RESERVED_SLABS);

/// Claims `slab` for the calling thread: true if it had no owner.
#[inline]
pub fn claim(slab: usize) -> bool {
    claim_in(&OWNED, slab)
}

/// Releases `slab`, which the calling thread owns.
#[inline]
pub fn release(slab: usize) {
    release_in(&OWNED, slab)
}

/// The slabs that have no owner, as a bit set.
#[inline]
pub fn unowned() -> usize {
    // Relaxed: a hint of where to look; a claim decides.
    !OWNED.load(Ordering::Relaxed) & ((1 << NUM_SLABS) - 1)
}

/// In a `fork` child, where only the forking thread exists: the slabs the
/// parent's other threads owned have no owner any more. `mine` is the slab
/// the forking thread owns, if any.
pub fn reset_after_fork(mine: Option<usize>) {
    // Relaxed: the child has a single thread.
    OWNED.store(
        mine.map_or(0, |s| 1 << s) | RESERVED_SLABS,
        Ordering::Relaxed,
    );
}
